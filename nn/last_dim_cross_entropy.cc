#include "nn/last_dim_cross_entropy.h"

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"

namespace lockstep {

absl::StatusOr<CrossEntropyResult> TargetsCrossEntropy(const Tensor& logits, const Tensor& targets, double grad_scale) {
  if (logits.dim() == 2 && targets.dim() == 1) {
    return CrossEntropy(logits, targets, kCrossEntropyIgnoreIndex, grad_scale);
  }
  const Shape& shape = logits.shape();
  Shape expected(shape.begin(), shape.end() - (shape.empty() ? 0 : 1));
  if (shape.size() < 2 || targets.shape() != expected) {
    return absl::InvalidArgumentError(absl::StrCat("cross-entropy: the model's output has shape [",
                                                   absl::StrJoin(shape, ", "), "] and the targets [",
                                                   absl::StrJoin(targets.shape(), ", "),
                                                   "]; expected targets of the output's shape without its last "
                                                   "dimension (the classes)"));
  }
  const int64_t classes = shape.back();
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor flat_logits, logits.Reshape({targets.numel(), classes}));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor flat_targets, targets.Reshape({targets.numel()}));
  LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce,
                            CrossEntropy(flat_logits, flat_targets, kCrossEntropyIgnoreIndex, grad_scale));
  LOCKSTEP_ASSIGN_OR_RETURN(ce.grad_logits, ce.grad_logits.Reshape(shape));
  return ce;
}

}  // namespace lockstep
