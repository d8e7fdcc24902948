#include "nn/flatten.h"

#include "absl/strings/str_cat.h"

namespace lockstep {

absl::StatusOr<Tensor> Flatten::Forward(const Tensor& input) {
  if (!input.defined() || input.dim() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("Flatten.Forward: expected a tensor with a batch dimension, got ",
                                                   input.defined() ? input.DebugString() : "undefined"));
  }
  saved_shape_ = input.shape();
  pending_ = true;
  const int64_t rows = input.shape()[0];
  return input.Reshape({rows, rows == 0 ? 0 : input.numel() / rows});
}

absl::StatusOr<Tensor> Flatten::BackwardImpl(const Tensor& grad_output, bool input_grad,
                                             const ParameterReadyFn& ready) {
  if (!pending_) {
    return absl::FailedPreconditionError(
        "Flatten.Backward: no pending Forward (each Backward consumes the last Forward)");
  }
  pending_ = false;
  if (!input_grad) return Tensor();
  if (!grad_output.defined()) return absl::InvalidArgumentError("Flatten.Backward: undefined gradient");
  return grad_output.Reshape(saved_shape_);
}

}  // namespace lockstep
