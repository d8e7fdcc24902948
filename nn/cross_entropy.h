// Cross-entropy loss over logits, as torch.nn.functional.cross_entropy with
// its defaults (mean reduction, ignore_index = -100), plus accuracy.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, labels));
//   // ce.loss: the mean loss; ce.grad_logits: d loss / d logits (f32)
//   LOCKSTEP_RETURN_IF_ERROR(model->Backward(ce.grad_logits).status());
//
// The log-softmax is the stable one (the row maximum subtracted first) and
// is evaluated in double, so the result is at least as accurate as
// PyTorch's f32 kernel. Logits of any floating dtype are promoted, as
// autocast runs cross_entropy in f32; the gradient is always f32 on the
// logits' device -- scale it (GradScaler) before backward casts it down.
// Logits on a CUDA device are copied to the host for this step (a batch of
// class scores is small) and the gradient copied back.
//
// `grad_scale` multiplies the gradient in double before its one rounding to
// f32: the gradient of grad_scale * loss, as backward of `loss / N` under
// gradient accumulation over N micro-batches gives (trainers/train_loop.h).
// The loss itself is never scaled.
#ifndef LOCKSTEP_NN_CROSS_ENTROPY_H_
#define LOCKSTEP_NN_CROSS_ENTROPY_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace lockstep {

inline constexpr int64_t kCrossEntropyIgnoreIndex = -100;

struct CrossEntropyResult {
  // Mean over the rows whose label is not ignored (NaN if all are, as torch).
  double loss = 0.0;
  // [N, C] f32 on the logits' device: (softmax - one_hot) * grad_scale /
  // counted rows, rounded once.
  Tensor grad_logits;
  // Rows whose first maximal logit is the label (torch.argmax), and the
  // number of rows counted.
  int64_t correct = 0;
  int64_t counted = 0;
};

// logits [N, C] floating; labels [N] i64 or i32 (any device), each in
// [0, C) or ignore_index. An out-of-range label is an error naming its row.
absl::StatusOr<CrossEntropyResult> CrossEntropy(const Tensor& logits, const Tensor& labels,
                                                int64_t ignore_index = kCrossEntropyIgnoreIndex,
                                                double grad_scale = 1.0);

}  // namespace lockstep

#endif  // LOCKSTEP_NN_CROSS_ENTROPY_H_
