#include "nn/dropout.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "nn/math.h"

namespace lockstep {
namespace {

// out = mask(in) for p < 1, zeros for p == 1.
absl::StatusOr<Tensor> Apply(const Tensor& in, double p, uint64_t seed, uint64_t call) {
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(in.shape(), in.dtype(), in.device()));
  if (p >= 1.0) {
    LOCKSTEP_RETURN_IF_ERROR(out.SetZero());
  } else {
    LOCKSTEP_RETURN_IF_ERROR(DropoutApply(in, out, 1.0 - p, seed, call));
  }
  return out;
}

}  // namespace

std::map<std::string, std::string> Dropout::OwnExtraState() const { return {{"calls", absl::StrCat(calls_)}}; }

absl::Status Dropout::LoadOwnExtraState(const std::string& key, const std::string& value, bool apply) {
  uint64_t calls = 0;
  if (key != "calls") return absl::InvalidArgumentError("Dropout has no extra state '" + key + "'");
  if (!absl::SimpleAtoi(value, &calls)) {
    return absl::InvalidArgumentError("Dropout calls must be an unsigned integer, got \"" + value + "\"");
  }
  if (apply) calls_ = calls;
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Dropout::Forward(const Tensor& input) {
  if (!(p_ >= 0.0 && p_ <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("Dropout: probability has to be between 0 and 1, but got ", p_));
  }
  if (!input.defined()) return absl::InvalidArgumentError("Dropout.Forward: undefined input");
  pending_ = true;
  saved_shape_ = input.shape();
  identity_ = !is_training() || p_ == 0.0;
  if (identity_) return input;
  mask_call_ = calls_++;
  return Apply(input, p_, seed_, mask_call_);
}

absl::StatusOr<Tensor> Dropout::BackwardImpl(const Tensor& grad_output, bool input_grad,
                                             const ParameterReadyFn& ready) {
  if (!pending_) {
    return absl::FailedPreconditionError(
        "Dropout.Backward: no pending Forward (each Backward consumes the last Forward)");
  }
  pending_ = false;
  if (!input_grad) return Tensor();
  if (!grad_output.defined() || grad_output.shape() != saved_shape_) {
    return absl::InvalidArgumentError(absl::StrCat("Dropout.Backward: expected a gradient of shape ",
                                                   ShapeToString(saved_shape_), ", got ",
                                                   grad_output.defined() ? grad_output.DebugString() : "undefined"));
  }
  if (identity_) return grad_output;
  return Apply(grad_output, p_, seed_, mask_call_);
}

}  // namespace lockstep
