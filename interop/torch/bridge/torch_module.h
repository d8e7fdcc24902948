// TorchModule: a libtorch module seen as a lockstep Module (nn/module.h), so
// that what lockstep builds on Module -- the training loop
// (trainers/train_loop.h), its optimizers (nn/sgd.h, nn/adam.h),
// checkpoints (nn/checkpoint/checkpoint.h), gradient clipping and GradScaler -- trains
// a torch::nn::Module as it is, with libtorch's kernels and autograd.
//
//   ResNet18 net(ResNet18Options{});
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TorchModule> model, TorchModule::Create(net));
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> sgd, Sgd::Create(model->NamedParameters(), sgd_options));
//   LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, model->Forward(images));   // libtorch's forward
//   LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, labels));
//   LOCKSTEP_RETURN_IF_ERROR(model->Backward(ce.grad_logits, /*input_grad=*/false).status());
//   LOCKSTEP_RETURN_IF_ERROR(sgd->Step());                              // updates net's parameters
//
// Nothing is copied: every parameter and buffer is the libtorch tensor's
// memory (interop/torch/bridge/tensor_bridge.h), under torch's state-dict names
// ("layer1.0.conv1.weight", "bn1.running_mean"), so a checkpoint loads into
// the Python twin with load_state_dict(strict=True). An optimizer step
// writes the libtorch parameters in place; LoadStateDict copies into them.
//
// Forward runs the module's forward (in training mode under autograd; in
// eval mode, torch's eval() and no gradient recording) and returns the
// output's values; Backward runs torch's backward from the last training
// Forward's output with the given gradient, then reports each parameter's
// gradient (param.grad(), seen without a copy) in reverse registration
// order. Only what autograd computes is there: the input's gradient is not
// returned (Backward returns an undefined tensor; the first layer of a model
// never needs it). Each parameter that requires a gradient starts with a
// zero one, so torch accumulates into the same tensor every step (ZeroGrad
// zeroes it in place) and a resumed run adds in the same order as an
// uninterrupted one. Errors libtorch raises come back as a Status.
//
// A TorchModule cannot be cloned (CloneTo: Unimplemented): DataParallel's
// replicas need lockstep layers. For DDP use interop/torch's
// DistributedDataParallel on the libtorch module (torch_module()).
#ifndef LOCKSTEP_INTEROP_TORCH_BRIDGE_TORCH_MODULE_H_
#define LOCKSTEP_INTEROP_TORCH_BRIDGE_TORCH_MODULE_H_

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <deque>
#include <functional>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/tensor.h"
#include "nn/module.h"

namespace lockstep {
namespace interop {

class TorchModule : public Module {
 public:
  using ForwardFn = std::function<at::Tensor(const at::Tensor&)>;

  // `module`'s parameters (each once) and buffers, and `forward` to run it.
  static absl::StatusOr<std::unique_ptr<TorchModule>> Create(std::shared_ptr<torch::nn::Module> module,
                                                             ForwardFn forward);
  // A TORCH_MODULE holder whose forward takes one tensor.
  template <typename Impl>
  static absl::StatusOr<std::unique_ptr<TorchModule>> Create(const torch::nn::ModuleHolder<Impl>& holder) {
    std::shared_ptr<Impl> impl = holder.ptr();
    return Create(impl, [impl](const at::Tensor& x) { return impl->forward(x); });
  }

  absl::string_view type_name() const override { return "TorchModule"; }
  absl::StatusOr<Tensor> Forward(const Tensor& input) override;

  // Bridges every parameter and gradient anew after something replaced the
  // libtorch tensors' data (param.set_data: FSDP, interop/torch/fsdp). A
  // parameter whose data has no memory behind it (FSDP's freed buffer)
  // becomes undefined here, and so does an undefined gradient.
  absl::Status RefreshParameters();

  torch::nn::Module& torch_module() { return *module_; }
  const std::shared_ptr<torch::nn::Module>& torch_module_ptr() const { return module_; }

 protected:
  absl::StatusOr<Tensor> BackwardImpl(const Tensor& grad_output, bool input_grad,
                                      const ParameterReadyFn& ready) override;
  absl::StatusOr<std::unique_ptr<Module>> NewLike(Device device) const override;

 private:
  TorchModule(std::shared_ptr<torch::nn::Module> module, ForwardFn forward)
      : module_(std::move(module)), forward_(std::move(forward)) {}

  std::shared_ptr<torch::nn::Module> module_;
  ForwardFn forward_;
  // Registered by address: deques never move their elements.
  std::deque<Parameter> params_;
  std::deque<Tensor> buffers_;
  std::vector<at::Tensor> torch_params_;  // params_[i]'s libtorch tensor
  at::Tensor pending_;                    // The last training forward's output (with its graph).
};

}  // namespace interop
}  // namespace lockstep

#endif  // LOCKSTEP_INTEROP_TORCH_BRIDGE_TORCH_MODULE_H_
