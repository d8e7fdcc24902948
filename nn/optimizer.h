// Optimizer: updates a module's parameters from their gradients.
//
//   SgdOptions options;
//   options.lr = 0.1;
//   options.momentum = 0.9;
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> sgd, Sgd::Create(model->NamedParameters(), options));
//   ... backward ...
//   LOCKSTEP_RETURN_IF_ERROR(sgd->Step());
//   LOCKSTEP_RETURN_IF_ERROR(sgd->ZeroGrad());
//
// Update rules and defaults are PyTorch 1.13's (single-tensor versions, f32
// parameters on CPU or CUDA). Parameters whose gradient is undefined are
// skipped, as PyTorch skips `p.grad is None`. The state (momentum buffers,
// moments, step counts) is exposed as named tensors keyed like PyTorch's
// optimizer.state_dict()["state"]: "state.<parameter index>.<key>", e.g.
// "state.0.momentum_buffer" or "state.3.exp_avg", so it can be checkpointed
// beside the model and restored for an exact resume.
#ifndef LOCKSTEP_NN_OPTIMIZER_H_
#define LOCKSTEP_NN_OPTIMIZER_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nn/module.h"

namespace lockstep {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // "SGD", "Adam", "AdamW" (PyTorch's class names).
  virtual absl::string_view type_name() const = 0;

  // One update of every parameter that has a gradient.
  virtual absl::Status Step() = 0;

  // Zeroes (or drops) the gradients of this optimizer's parameters.
  absl::Status ZeroGrad(bool set_to_none = false);

  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }

  const std::vector<NamedParameter>& parameters() const { return params_; }

  // The state tensors (handles), named "state.<index>.<key>".
  virtual std::vector<NamedTensor> StateTensors() const;
  // Replaces the state with copies of `state` (as written by StateTensors);
  // keys, shapes and dtypes are checked against the parameters and every
  // problem is listed. Nothing changes unless all checks pass.
  virtual absl::Status LoadStateTensors(const std::vector<NamedTensor>& state);
  // For an optimizer whose state is spread over ranks
  // (ddp/zero_redundancy_optimizer.h): gathers it so that StateTensors on
  // rank `to` returns all of it. Every rank calls it before a checkpoint is
  // written; a plain optimizer has nothing to do.
  virtual absl::Status ConsolidateState(int to) { return absl::OkStatus(); }

  // The state keys a parameter has once it has been stepped.
  struct StateKey {
    std::string key;
    bool scalar;  // a 0-d f32 tensor (e.g. Adam's step), else like the parameter
  };
  std::vector<StateKey> state_keys() const { return StateKeys(); }

  // Hyperparameters as strings (for a checkpoint's metadata), e.g. "lr".
  virtual std::map<std::string, std::string> Hyperparameters() const = 0;

 protected:
  Optimizer(std::vector<NamedParameter> params, double lr) : params_(std::move(params)), lr_(lr) {}

  virtual std::vector<StateKey> StateKeys() const = 0;

  // The state of parameter `index` (created on first use by the subclass).
  std::map<std::string, Tensor>& StateOf(size_t index) { return state_[index]; }
  bool HasState(size_t index) const { return state_.count(index) > 0; }

 private:
  std::vector<NamedParameter> params_;
  double lr_;
  std::map<size_t, std::map<std::string, Tensor>> state_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_NN_OPTIMIZER_H_
