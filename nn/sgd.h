// SGD with momentum, dampening, Nesterov and weight decay: torch.optim.SGD
// (1.13), update for update:
//
//   d = grad + weight_decay * p
//   buf = d on the first step, else momentum * buf + (1 - dampening) * d
//   d = nesterov ? d + momentum * buf : buf          (when momentum != 0)
//   p = p - lr * d
//
// State: "momentum_buffer" (only when momentum != 0).
#ifndef LOCKSTEP_NN_SGD_H_
#define LOCKSTEP_NN_SGD_H_

#include <memory>

#include "nn/optimizer.h"

namespace lockstep {

struct SgdOptions {
  double lr = 0.0;  // required in PyTorch: set it
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;
};

class Sgd : public Optimizer {
 public:
  // Validates as PyTorch does (lr, momentum, weight_decay >= 0; Nesterov
  // needs momentum > 0 and zero dampening).
  static absl::StatusOr<std::unique_ptr<Sgd>> Create(std::vector<NamedParameter> params, const SgdOptions& options);
  absl::string_view type_name() const override { return "SGD"; }
  absl::Status Step() override;
  std::map<std::string, std::string> Hyperparameters() const override;
  const SgdOptions& options() const { return options_; }

 protected:
  std::vector<StateKey> StateKeys() const override;

 private:
  Sgd(std::vector<NamedParameter> params, const SgdOptions& options)
      : Optimizer(std::move(params), options.lr), options_(options) {}
  SgdOptions options_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_NN_SGD_H_
