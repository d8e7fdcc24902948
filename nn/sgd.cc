#include "nn/sgd.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "nn/internal/optimizer_checks.h"
#include "nn/kernels/cuda_math.h"
#include "nn/kernels/nn_elementwise.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<Sgd>> Sgd::Create(std::vector<NamedParameter> params, const SgdOptions& options) {
  if (!(options.lr >= 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat("SGD: Invalid learning rate: ", options.lr));
  }
  if (!(options.momentum >= 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat("SGD: Invalid momentum value: ", options.momentum));
  }
  if (!(options.weight_decay >= 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat("SGD: Invalid weight_decay value: ", options.weight_decay));
  }
  if (options.nesterov && (options.momentum <= 0.0 || options.dampening != 0.0)) {
    return absl::InvalidArgumentError("SGD: Nesterov momentum requires a momentum and zero dampening");
  }
  LOCKSTEP_RETURN_IF_ERROR(optimizer_internal::CheckParameters("SGD", params));
  return std::unique_ptr<Sgd>(new Sgd(std::move(params), options));
}

std::vector<Optimizer::StateKey> Sgd::StateKeys() const {
  if (options_.momentum == 0.0) return {};
  return {{"momentum_buffer", false}};
}

std::map<std::string, std::string> Sgd::Hyperparameters() const {
  return {{"lr", absl::StrCat(lr())},
          {"momentum", absl::StrCat(options_.momentum)},
          {"dampening", absl::StrCat(options_.dampening)},
          {"weight_decay", absl::StrCat(options_.weight_decay)},
          {"nesterov", options_.nesterov ? "true" : "false"},
          {"maximize", options_.maximize ? "true" : "false"}};
}

absl::Status Sgd::Step() {
  nn_elementwise::SgdParams params;
  params.lr = static_cast<float>(lr());
  params.momentum = static_cast<float>(options_.momentum);
  params.one_minus_dampening = static_cast<float>(1.0 - options_.dampening);
  params.weight_decay = static_cast<float>(options_.weight_decay);
  nn_elementwise::SgdFlags flags;
  flags.decay = options_.weight_decay != 0.0;
  flags.momentum = options_.momentum != 0.0;
  flags.nesterov = options_.nesterov;
  flags.maximize = options_.maximize;
  for (size_t i = 0; i < parameters().size(); ++i) {
    Parameter& p = *parameters()[i].parameter;
    if (!p.grad.defined()) continue;
    LOCKSTEP_RETURN_IF_ERROR(optimizer_internal::CheckGrad("SGD", parameters()[i]));
    float* buf = nullptr;
    flags.first_step = false;
    if (options_.momentum != 0.0) {
      std::map<std::string, Tensor>& state = StateOf(i);
      auto it = state.find("momentum_buffer");
      if (it == state.end()) {
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor created, Tensor::Empty(p.value.shape(), DType::kF32, p.value.device()));
        it = state.emplace("momentum_buffer", created).first;
        flags.first_step = true;
      }
      buf = it->second.data<float>();
    }
    float* value = p.value.data<float>();
    const float* grad = p.grad.data<float>();
    const int64_t n = p.value.numel();
    if (p.value.device().is_cuda()) {
      LOCKSTEP_RETURN_IF_ERROR(nn_cuda::Sgd(p.value.device().index(), params, flags, value, grad, buf, n));
      continue;
    }
    // One loop per flag combination: no branches inside, so it vectorizes.
    nn_elementwise::WithBools(
        [&](auto decay, auto momentum, auto nesterov, auto maximize, auto first) {
          using Flags = nn_elementwise::StaticSgdFlags<decay, momentum, nesterov, maximize, first>;
          if (buf == nullptr) {
            for (int64_t k = 0; k < n; ++k) {
              float unused = 0.0f;
              nn_elementwise::SgdUpdate(params, Flags{}, value[k], grad[k], unused);
            }
          } else {
#pragma GCC ivdep
            for (int64_t k = 0; k < n; ++k) {
              nn_elementwise::SgdUpdate(params, Flags{}, value[k], grad[k], buf[k]);
            }
          }
        },
        flags.decay, flags.momentum, flags.nesterov, flags.maximize, flags.first_step);
  }
  return absl::OkStatus();
}

}  // namespace lockstep
