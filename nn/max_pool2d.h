// MaxPool2d: window maxima over [batch, channels, height, width] f32, bf16
// or f16 tensors (torch.nn.MaxPool2d with dilation 1, ceil_mode false). The
// stride defaults to the kernel size, as in PyTorch. Forward keeps the
// winners' indices; backward routes each window's gradient to its winner.
// The output and the input gradient have the input's dtype (bf16/f16 values
// are pooled widened to f32, which changes none: a maximum is one of them;
// gradients a pixel gets from overlapping windows are summed in f32 and
// rounded once).
#ifndef LOCKSTEP_NN_MAX_POOL2D_H_
#define LOCKSTEP_NN_MAX_POOL2D_H_

#include <memory>

#include "core/dtype.h"
#include "nn/math.h"
#include "nn/module.h"

namespace lockstep {

class MaxPool2d : public Module {
 public:
  // stride 0 means "the kernel size"; padding at most half the kernel.
  MaxPool2d(int64_t kernel, int64_t stride = 0, int64_t padding = 0)
      : window_{kernel, kernel, stride == 0 ? kernel : stride, stride == 0 ? kernel : stride, padding, padding} {}
  explicit MaxPool2d(const Window2d& window) : window_(window) {}

  absl::string_view type_name() const override { return "MaxPool2d"; }
  absl::StatusOr<Tensor> Forward(const Tensor& input) override;

 protected:
  absl::StatusOr<Tensor> BackwardImpl(const Tensor& grad_output, bool input_grad,
                                      const ParameterReadyFn& ready) override;
  absl::StatusOr<std::unique_ptr<Module>> NewLike(Device device) const override {
    return std::unique_ptr<Module>(new MaxPool2d(window_));
  }

 private:
  Window2d window_;
  Shape saved_input_shape_;
  DType saved_input_dtype_ = DType::kF32;
  Tensor saved_indices_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_NN_MAX_POOL2D_H_
