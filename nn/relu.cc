#include "nn/relu.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "nn/math.h"

namespace lockstep {

absl::StatusOr<Tensor> ReLU::Forward(const Tensor& input) {
  if (!input.defined()) return absl::InvalidArgumentError("ReLU.Forward: undefined input");
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(input.shape(), input.dtype(), input.device()));
  LOCKSTEP_RETURN_IF_ERROR(Relu(input, out));
  saved_output_ = out;
  return out;
}

absl::StatusOr<Tensor> ReLU::BackwardImpl(const Tensor& grad_output, bool input_grad, const ParameterReadyFn& ready) {
  if (!saved_output_.defined()) {
    return absl::FailedPreconditionError("ReLU.Backward: no pending Forward (each Backward consumes the last Forward)");
  }
  const Tensor out = std::exchange(saved_output_, Tensor());
  if (!input_grad) return Tensor();
  if (!grad_output.defined() || grad_output.shape() != out.shape()) {
    return absl::InvalidArgumentError(absl::StrCat("ReLU.Backward: expected a gradient of shape ",
                                                   ShapeToString(out.shape()), ", got ",
                                                   grad_output.defined() ? grad_output.DebugString() : "undefined"));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor grad_in, Tensor::Empty(out.shape(), out.dtype(), out.device()));
  LOCKSTEP_RETURN_IF_ERROR(ReluBackward(grad_output, out, grad_in));
  return grad_in;
}

}  // namespace lockstep
