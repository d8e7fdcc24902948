#include "amp/precision_policy.h"

#include "absl/strings/str_cat.h"

namespace lockstep {

absl::StatusOr<PrecisionPolicy> ParsePrecision(absl::string_view name) {
  PrecisionPolicy policy;
  if (name == "fp32" || name == "f32") {
    policy.compute_dtype = DType::kF32;
  } else if (name == "fp16" || name == "f16") {
    policy.compute_dtype = DType::kF16;
  } else if (name == "bf16") {
    policy.compute_dtype = DType::kBF16;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("ParsePrecision: unknown precision \"", name,
                                                   "\"; expected one of fp32 (or f32), fp16 (or f16), bf16"));
  }
  policy.master_dtype = DType::kF32;
  return policy;
}

bool NeedsLossScaling(const PrecisionPolicy& policy) { return policy.compute_dtype == DType::kF16; }

std::string PrecisionName(const PrecisionPolicy& policy) {
  if (policy.master_dtype == DType::kF32) {
    switch (policy.compute_dtype) {
      case DType::kF32:
        return "fp32";
      case DType::kF16:
        return "fp16";
      case DType::kBF16:
        return "bf16";
      default:
        break;
    }
  }
  return absl::StrCat("compute=", DTypeName(policy.compute_dtype), ",master=", DTypeName(policy.master_dtype));
}

}  // namespace lockstep
