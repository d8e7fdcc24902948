// ReLU: max(x, 0) elementwise (torch.nn.ReLU), any floating dtype, CPU or
// CUDA. Keeps its output for backward; the gradient passes where the output
// is positive.
#ifndef LOCKSTEP_NN_RELU_H_
#define LOCKSTEP_NN_RELU_H_

#include <memory>

#include "nn/module.h"

namespace lockstep {

class ReLU : public Module {
 public:
  ReLU() = default;
  absl::string_view type_name() const override { return "ReLU"; }
  absl::StatusOr<Tensor> Forward(const Tensor& input) override;

 protected:
  absl::StatusOr<Tensor> BackwardImpl(const Tensor& grad_output, bool input_grad,
                                      const ParameterReadyFn& ready) override;
  absl::StatusOr<std::unique_ptr<Module>> NewLike(Device device) const override {
    return std::unique_ptr<Module>(new ReLU());
  }

 private:
  Tensor saved_output_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_NN_RELU_H_
