#include "nn/sequential.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace lockstep {

absl::StatusOr<Tensor> Sequential::Forward(const Tensor& input) {
  Tensor x = input;
  for (size_t i = 0; i < size(); ++i) {
    absl::StatusOr<Tensor> y = child(i).Forward(x);
    if (!y.ok()) {
      return absl::Status(y.status().code(),
                          absl::StrCat("Sequential child ", i, " (", child(i).type_name(),
                                       "): ", y.status().message()));
    }
    x = *std::move(y);
  }
  return x;
}

absl::StatusOr<Tensor> Sequential::BackwardImpl(const Tensor& grad_output, bool input_grad,
                                                const GradReadyHook& hook) {
  // Without an input gradient, nothing before the first child with
  // parameters needs one either (e.g. no 128x784 GEMM for Flatten's input).
  size_t first_trainable = size();
  for (size_t i = 0; i < size() && first_trainable == size(); ++i) {
    if (child(i).HasParameters()) first_trainable = i;
  }
  Tensor g = grad_output;
  for (size_t i = size(); i-- > 0;) {
    const bool child_input_grad = input_grad || i > first_trainable;
    absl::StatusOr<Tensor> gi = ChildBackward(child(i), g, child_input_grad, hook);
    if (!gi.ok()) {
      return absl::Status(gi.status().code(),
                          absl::StrCat("Sequential child ", i, " (", child(i).type_name(),
                                       "): ", gi.status().message()));
    }
    g = *std::move(gi);
  }
  return g;
}

absl::StatusOr<std::unique_ptr<Module>> Sequential::NewLike(Device device) const {
  auto copy = std::make_unique<Sequential>();
  for (size_t i = 0; i < size(); ++i) {
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Module> c, ChildNewLike(child(i), device));
    copy->Add(std::move(c));
  }
  return std::unique_ptr<Module>(std::move(copy));
}

}  // namespace lockstep
