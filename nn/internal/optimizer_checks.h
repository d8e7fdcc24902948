// Argument checks shared by the optimizers.
#ifndef LOCKSTEP_NN_INTERNAL_OPTIMIZER_CHECKS_H_
#define LOCKSTEP_NN_INTERNAL_OPTIMIZER_CHECKS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nn/module.h"

namespace lockstep {
namespace optimizer_internal {

// Every parameter an f32 tensor; no parameter twice.
inline absl::Status CheckParameters(const char* optimizer, const std::vector<NamedParameter>& params) {
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& v = params[i].parameter->value;
    if (!v.defined() || v.dtype() != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(
          optimizer, ": parameter ", i, " ('", params[i].name, "') is ", v.defined() ? v.DebugString() : "undefined",
          "; the optimizers update f32 (master) weights -- keep parameters in f32 and use a "
          "compute dtype for mixed precision"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (params[j].parameter == params[i].parameter) {
        return absl::InvalidArgumentError(
            absl::StrCat(optimizer, ": parameter '", params[i].name, "' appears twice (indices ", j, " and ", i, ")"));
      }
    }
  }
  return absl::OkStatus();
}

inline absl::Status CheckGrad(const char* optimizer, const NamedParameter& p) {
  const Tensor& v = p.parameter->value;
  const Tensor& g = p.parameter->grad;
  if (g.dtype() != DType::kF32 || g.shape() != v.shape() || g.device() != v.device()) {
    return absl::InvalidArgumentError(absl::StrCat(optimizer, ": gradient of '", p.name, "' is ", g.DebugString(),
                                                   " but the parameter is ", v.DebugString()));
  }
  return absl::OkStatus();
}

}  // namespace optimizer_internal
}  // namespace lockstep

#endif  // LOCKSTEP_NN_INTERNAL_OPTIMIZER_CHECKS_H_
