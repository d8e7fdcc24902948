// Adam and AdamW: torch.optim.Adam / AdamW (1.13), update for update, in f32:
//
//   AdamW: p = p * (1 - lr * weight_decay)        Adam: g = g + weight_decay * p
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g            (amsgrad: v_max = max(v_max, v))
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//
// Defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0 (Adam) or
// 1e-2 (AdamW). State: "step" (0-d f32, as PyTorch keeps it), "exp_avg",
// "exp_avg_sq", and "max_exp_avg_sq" with amsgrad.
#ifndef LOCKSTEP_NN_ADAM_H_
#define LOCKSTEP_NN_ADAM_H_

#include <memory>

#include "nn/optimizer.h"

namespace lockstep {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  bool maximize = false;
  // AdamW's decoupled weight decay instead of Adam's L2 term.
  bool decoupled_weight_decay = false;
};

// AdamW's defaults: AdamOptions with weight_decay 1e-2 and decoupling.
AdamOptions AdamWOptions();

class Adam : public Optimizer {
 public:
  // Validates as PyTorch does (lr, eps, weight_decay >= 0; betas in [0, 1)).
  static absl::StatusOr<std::unique_ptr<Adam>> Create(std::vector<NamedParameter> params, const AdamOptions& options);
  absl::string_view type_name() const override { return options_.decoupled_weight_decay ? "AdamW" : "Adam"; }
  absl::Status Step() override;
  std::map<std::string, std::string> Hyperparameters() const override;
  const AdamOptions& options() const { return options_; }

 protected:
  std::vector<StateKey> StateKeys() const override;

 private:
  Adam(std::vector<NamedParameter> params, const AdamOptions& options)
      : Optimizer(std::move(params), options.lr), options_(options) {}
  AdamOptions options_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_NN_ADAM_H_
