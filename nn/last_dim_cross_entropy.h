// Cross-entropy over the last dimension of logits of any rank: logits
// [..., C] against integer targets of the logits' shape without C, every
// position a prediction. A classifier's logits [N, C] with targets [N] and a
// sequence model's [B, T, C] with [B, T] go through the same call, as
// torch's cross_entropy(logits.view(-1, C), targets.view(-1)).
//
//   LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, TargetsCrossEntropy(logits, targets));
//   // ce.loss, ce.correct, ce.counted: per prediction (position)
//   LOCKSTEP_RETURN_IF_ERROR(model->Backward(ce.grad_logits).status());  // logits' shape
//
// It is CrossEntropy (nn/cross_entropy.h) on the flattened views, so loss,
// counts and gradient are exactly those of the flattened call; the gradient
// comes back in the logits' shape. Targets of another shape are an error
// naming both shapes.
#ifndef LOCKSTEP_NN_LAST_DIM_CROSS_ENTROPY_H_
#define LOCKSTEP_NN_LAST_DIM_CROSS_ENTROPY_H_

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "nn/cross_entropy.h"

namespace lockstep {

// Cross-entropy of `logits` [..., C] against integer `targets` whose shape
// is logits' without the last dimension; grad_logits has logits' shape.
// grad_scale as CrossEntropy's.
absl::StatusOr<CrossEntropyResult> TargetsCrossEntropy(const Tensor& logits, const Tensor& targets,
                                                       double grad_scale = 1.0);

}  // namespace lockstep

#endif  // LOCKSTEP_NN_LAST_DIM_CROSS_ENTROPY_H_
