// PrecisionPolicy: which dtypes a mixed-precision run computes and keeps
// weights in.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(PrecisionPolicy policy, ParsePrecision(flag));  // "bf16"
//   GradScalerOptions scaling;
//   scaling.enabled = NeedsLossScaling(policy);  // f16 only
//   std::printf("precision %s\n", PrecisionName(policy).c_str());  // "bf16"
//
// The policy a model follows (as torch.autocast does for nn.Linear and
// nn.Conv2d):
//   * A Linear or Conv2d layer rounds its input, weight and bias to
//     compute_dtype, multiplies and accumulates in f32, and rounds its
//     output to compute_dtype; BatchNorm, ReLU and MaxPool2d keep such
//     activations in compute_dtype (nn/conv2d.h, nn/batch_norm.h).
//   * The optimizer updates master weights kept in master_dtype (f32), which
//     Linear rounds to compute_dtype on every forward: updates too small to
//     change an f16/bf16 weight still accumulate.
//   * f16 needs loss scaling (GradScaler): its smallest normal is 6.1e-5, so
//     small gradients underflow. bf16 has f32's exponent range and runs
//     without it.
#ifndef LOCKSTEP_AMP_PRECISION_POLICY_H_
#define LOCKSTEP_AMP_PRECISION_POLICY_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"

namespace lockstep {

struct PrecisionPolicy {
  DType compute_dtype = DType::kF32;  // What Linear layers compute in.
  DType master_dtype = DType::kF32;   // Optimizer (master) weights.
};

// "fp32" or "f32": f32 throughout; "fp16" or "f16": f16 compute; "bf16": bf16
// compute; master weights f32 in all three. Anything else is InvalidArgument
// listing the accepted names.
absl::StatusOr<PrecisionPolicy> ParsePrecision(absl::string_view name);

// True only for f16 compute.
bool NeedsLossScaling(const PrecisionPolicy& policy);

// "fp32", "fp16" or "bf16" for the policies ParsePrecision makes; otherwise
// "compute=<dtype>,master=<dtype>" (e.g. "compute=f64,master=f64").
std::string PrecisionName(const PrecisionPolicy& policy);

}  // namespace lockstep

#endif  // LOCKSTEP_AMP_PRECISION_POLICY_H_
