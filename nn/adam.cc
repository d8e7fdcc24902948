#include "nn/adam.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "nn/internal/optimizer_checks.h"
#include "nn/kernels/cuda_math.h"
#include "nn/kernels/nn_elementwise.h"

namespace lockstep {

AdamOptions AdamWOptions() {
  AdamOptions options;
  options.weight_decay = 1e-2;
  options.decoupled_weight_decay = true;
  return options;
}

absl::StatusOr<std::unique_ptr<Adam>> Adam::Create(std::vector<NamedParameter> params, const AdamOptions& options) {
  const char* name = options.decoupled_weight_decay ? "AdamW" : "Adam";
  if (!(options.lr >= 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": Invalid learning rate: ", options.lr));
  }
  if (!(options.eps >= 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": Invalid epsilon value: ", options.eps));
  }
  if (!(options.beta1 >= 0.0 && options.beta1 < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": Invalid beta parameter at index 0: ", options.beta1));
  }
  if (!(options.beta2 >= 0.0 && options.beta2 < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": Invalid beta parameter at index 1: ", options.beta2));
  }
  if (!(options.weight_decay >= 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": Invalid weight_decay value: ", options.weight_decay));
  }
  LOCKSTEP_RETURN_IF_ERROR(optimizer_internal::CheckParameters(name, params));
  return std::unique_ptr<Adam>(new Adam(std::move(params), options));
}

std::vector<Optimizer::StateKey> Adam::StateKeys() const {
  std::vector<StateKey> keys = {{"step", true}, {"exp_avg", false}, {"exp_avg_sq", false}};
  if (options_.amsgrad) keys.push_back({"max_exp_avg_sq", false});
  return keys;
}

std::map<std::string, std::string> Adam::Hyperparameters() const {
  return {{"lr", absl::StrCat(lr())},
          {"beta1", absl::StrCat(options_.beta1)},
          {"beta2", absl::StrCat(options_.beta2)},
          {"eps", absl::StrCat(options_.eps)},
          {"weight_decay", absl::StrCat(options_.weight_decay)},
          {"amsgrad", options_.amsgrad ? "true" : "false"},
          {"maximize", options_.maximize ? "true" : "false"},
          {"decoupled_weight_decay", options_.decoupled_weight_decay ? "true" : "false"}};
}

absl::Status Adam::Step() {
  const char* name = options_.decoupled_weight_decay ? "AdamW" : "Adam";
  for (size_t i = 0; i < parameters().size(); ++i) {
    Parameter& p = *parameters()[i].parameter;
    if (!p.grad.defined()) continue;
    LOCKSTEP_RETURN_IF_ERROR(optimizer_internal::CheckGrad(name, parameters()[i]));
    std::map<std::string, Tensor>& state = StateOf(i);
    if (state.empty()) {
      // PyTorch: step = tensor(0.), moments = zeros_like(p).
      LOCKSTEP_ASSIGN_OR_RETURN(state["step"], Tensor::Zeros({}, DType::kF32));
      for (const StateKey& k : StateKeys()) {
        if (k.scalar) continue;
        LOCKSTEP_ASSIGN_OR_RETURN(state[k.key], Tensor::Zeros(p.value.shape(), DType::kF32, p.value.device()));
      }
    }
    // The step counter is a host f32 scalar (0-d), incremented in f32 as
    // PyTorch's step_t += 1; the scalars below are computed in double from
    // it and rounded to f32 where PyTorch passes them to f32 kernels.
    Tensor& step_tensor = state["step"];
    if (!step_tensor.device().is_cpu()) {
      LOCKSTEP_ASSIGN_OR_RETURN(step_tensor, step_tensor.To(Device::Cpu()));
    }
    float& step_f = *step_tensor.data<float>();
    step_f = step_f + 1.0f;
    const double step = step_f;
    const double lr = this->lr();
    const double bias_correction1 = 1.0 - std::pow(options_.beta1, step);
    const double bias_correction2 = 1.0 - std::pow(options_.beta2, step);
    nn_elementwise::AdamParams params;
    params.beta1 = static_cast<float>(options_.beta1);
    params.one_minus_beta1 = static_cast<float>(1.0 - options_.beta1);
    params.beta2 = static_cast<float>(options_.beta2);
    params.one_minus_beta2 = static_cast<float>(1.0 - options_.beta2);
    params.weight_decay = static_cast<float>(options_.weight_decay);
    params.decay_factor = static_cast<float>(1.0 - lr * options_.weight_decay);
    params.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
    params.eps = static_cast<float>(options_.eps);
    params.neg_step_size = static_cast<float>(-(lr / bias_correction1));
    nn_elementwise::AdamFlags flags;
    flags.decoupled = options_.decoupled_weight_decay;
    flags.decay = options_.weight_decay != 0.0;
    flags.amsgrad = options_.amsgrad;
    flags.maximize = options_.maximize;
    float* value = p.value.data<float>();
    const float* grad = p.grad.data<float>();
    float* m = state["exp_avg"].data<float>();
    float* v = state["exp_avg_sq"].data<float>();
    float* v_max = options_.amsgrad ? state["max_exp_avg_sq"].data<float>() : nullptr;
    const int64_t n = p.value.numel();
    if (p.value.device().is_cuda()) {
      LOCKSTEP_RETURN_IF_ERROR(nn_cuda::Adam(p.value.device().index(), params, flags, value, grad, m, v, v_max, n));
      continue;
    }
    // One loop per flag combination: no branches inside, so it vectorizes.
    nn_elementwise::WithBools(
        [&](auto decoupled, auto decay, auto amsgrad, auto maximize) {
          using Flags = nn_elementwise::StaticAdamFlags<decoupled, decay, amsgrad, maximize>;
          if (v_max == nullptr) {
#pragma GCC ivdep
            for (int64_t k = 0; k < n; ++k) {
              float unused = 0.0f;
              nn_elementwise::AdamUpdate(params, Flags{}, value[k], grad[k], m[k], v[k], unused);
            }
          } else {
#pragma GCC ivdep
            for (int64_t k = 0; k < n; ++k) {
              nn_elementwise::AdamUpdate(params, Flags{}, value[k], grad[k], m[k], v[k], v_max[k]);
            }
          }
        },
        flags.decoupled, flags.decay, flags.amsgrad, flags.maximize);
  }
  return absl::OkStatus();
}

}  // namespace lockstep
