#include "nn/max_pool2d.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace lockstep {

absl::StatusOr<Tensor> MaxPool2d::Forward(const Tensor& input) {
  if (!input.defined() || input.dim() != 4) {
    return absl::InvalidArgumentError(absl::StrCat("MaxPool2d.Forward: expected [batch, channels, height, width], got ",
                                                   input.defined() ? input.DebugString() : "undefined"));
  }
  const Shape& s = input.shape();
  LOCKSTEP_ASSIGN_OR_RETURN(Shape out_hw, WindowOutputSize(s[2], s[3], window_));
  const Shape out_shape = {s[0], s[1], out_hw[0], out_hw[1]};
  const DType dtype = input.dtype();
  Tensor x = input;
  if (dtype != DType::kF32) {
    if (dtype != DType::kBF16 && dtype != DType::kF16) {
      return absl::InvalidArgumentError(
          absl::StrCat("MaxPool2d.Forward: expected an f32, bf16 or f16 input, got ", input.DebugString()));
    }
    LOCKSTEP_ASSIGN_OR_RETURN(x, CastTo(input, DType::kF32));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(out_shape, DType::kF32, input.device()));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor indices, Tensor::Empty(out_shape, DType::kI32, input.device()));
  LOCKSTEP_RETURN_IF_ERROR(MaxPool2dForward(x, window_, out, indices));
  saved_input_shape_ = s;
  saved_input_dtype_ = dtype;
  saved_indices_ = indices;
  return CastTo(out, dtype);
}

absl::StatusOr<Tensor> MaxPool2d::BackwardImpl(const Tensor& grad_output, bool input_grad,
                                               const ParameterReadyFn& ready) {
  if (!saved_indices_.defined()) {
    return absl::FailedPreconditionError(
        "MaxPool2d.Backward: no pending Forward (each Backward consumes the last Forward)");
  }
  // Checked before the Forward is consumed: a refused gradient loses nothing.
  if (input_grad &&
      (!grad_output.defined() || !(grad_output.dtype() == DType::kF32 || grad_output.dtype() == DType::kBF16 ||
                                   grad_output.dtype() == DType::kF16))) {
    return absl::InvalidArgumentError(absl::StrCat("MaxPool2d.Backward: expected an f32, bf16 or f16 gradient, got ",
                                                   grad_output.defined() ? grad_output.DebugString() : "undefined"));
  }
  const Tensor indices = std::exchange(saved_indices_, Tensor());
  if (!input_grad) return Tensor();
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor g, CastTo(grad_output, DType::kF32));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor grad_in, Tensor::Empty(saved_input_shape_, DType::kF32, indices.device()));
  LOCKSTEP_RETURN_IF_ERROR(MaxPool2dBackward(g, indices, window_, grad_in));
  return CastTo(grad_in, saved_input_dtype_);
}

}  // namespace lockstep
