#include "interop/torch/bridge/torch_module.h"

#include <torch/csrc/autograd/grad_mode.h>

#include <exception>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "interop/torch/bridge/tensor_bridge.h"

namespace lockstep {
namespace interop {

absl::StatusOr<std::unique_ptr<TorchModule>> TorchModule::Create(std::shared_ptr<torch::nn::Module> module,
                                                                 ForwardFn forward) {
  if (module == nullptr || !forward) {
    return absl::InvalidArgumentError("TorchModule::Create: the module and its forward are required");
  }
  std::unique_ptr<TorchModule> m(new TorchModule(std::move(module), std::move(forward)));
  try {
    std::unordered_set<const void*> seen;
    for (const auto& item : m->module_->named_parameters(/*recurse=*/true)) {
      at::Tensor p = item.value();
      if (!p.defined() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
      Parameter& param = m->params_.emplace_back();
      LOCKSTEP_ASSIGN_OR_RETURN(param.value, FromTorch(p));
      param.requires_grad = p.requires_grad();
      if (param.requires_grad) {
        if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
        LOCKSTEP_ASSIGN_OR_RETURN(param.grad, FromTorch(p.grad()));
      }
      m->torch_params_.push_back(p);
      m->RegisterParameter(item.key(), &param);
    }
    for (const auto& item : m->module_->named_buffers(/*recurse=*/true)) {
      if (!item.value().defined() || !seen.insert(item.value().unsafeGetTensorImpl()).second) continue;
      Tensor& buffer = m->buffers_.emplace_back();
      LOCKSTEP_ASSIGN_OR_RETURN(buffer, FromTorch(item.value()));
      m->RegisterBuffer(item.key(), &buffer);
    }
    m->Train(m->module_->is_training());
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("TorchModule::Create: libtorch raised: ", e.what()));
  }
  return m;
}

absl::StatusOr<Tensor> TorchModule::Forward(const Tensor& input) {
  pending_ = at::Tensor();
  LOCKSTEP_ASSIGN_OR_RETURN(at::Tensor x, ToTorch(input));
  try {
    module_->train(is_training());
    at::Tensor out;
    if (is_training()) {
      out = forward_(x);
      pending_ = out;
    } else {
      torch::NoGradGuard no_grad;
      out = forward_(x);
    }
    return FromTorch(out.detach().contiguous());
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("TorchModule::Forward: the libtorch module's forward raised: ", e.what()));
  }
}

absl::StatusOr<Tensor> TorchModule::BackwardImpl(const Tensor& grad_output, bool input_grad,
                                                 const ParameterReadyFn& ready) {
  if (!pending_.defined()) {
    return absl::FailedPreconditionError(
        "TorchModule::Backward: no training forward is pending (call Forward in training mode first)");
  }
  at::Tensor out = std::move(pending_);
  pending_ = at::Tensor();
  LOCKSTEP_ASSIGN_OR_RETURN(at::Tensor g, ToTorch(grad_output));
  try {
    if (g.numel() != out.numel()) {
      return absl::InvalidArgumentError(absl::StrCat("TorchModule::Backward: the gradient has ", g.numel(),
                                                     " elements but the forward's output ", out.numel()));
    }
    out.backward(g.view(out.sizes()).to(out.scalar_type()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("TorchModule::Backward: libtorch's backward raised: ", e.what()));
  }
  // Reverse registration order, as autograd finishes them.
  for (size_t i = params_.size(); i-- > 0;) {
    Parameter& p = params_[i];
    if (!p.requires_grad) continue;
    const at::Tensor& tg = torch_params_[i].grad();
    if (!tg.defined()) continue;  // Not reached by this backward.
    // Bridged anew: DDP's gradient_as_bucket_view replaces the tensor.
    if (!tg.is_contiguous()) {
      return absl::InternalError(absl::StrCat("TorchModule::Backward: parameter ", i,
                                              "'s gradient is not contiguous; lockstep's optimizers need it dense"));
    }
    LOCKSTEP_ASSIGN_OR_RETURN(p.grad, FromTorch(tg));
    if (ready) LOCKSTEP_RETURN_IF_ERROR(ready(p));
  }
  (void)input_grad;  // Not computed: see the header.
  return Tensor();
}

absl::Status TorchModule::RefreshParameters() {
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& p = torch_params_[i];
    Parameter& param = params_[i];
    const size_t needed = (p.storage_offset() + p.numel()) * p.element_size();
    if (p.numel() > 0 && p.storage().nbytes() < needed) {
      param.value = Tensor();
    } else {
      LOCKSTEP_ASSIGN_OR_RETURN(param.value, FromTorch(p));
    }
    if (p.grad().defined()) {
      LOCKSTEP_ASSIGN_OR_RETURN(param.grad, FromTorch(p.grad()));
    } else {
      param.grad = Tensor();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Module>> TorchModule::NewLike(Device device) const {
  return absl::UnimplementedError(
      "TorchModule cannot be cloned: a libtorch module has no lockstep layers to copy (use interop/torch's "
      "DistributedDataParallel on the libtorch module instead of DataParallel)");
}

}  // namespace interop
}  // namespace lockstep
