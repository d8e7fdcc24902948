#include "nn/conv2d.h"

#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "nn/init.h"
#include "nn/internal/cudnn_conv_kernels.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<Conv2d>> Conv2d::Create(const Conv2dOptions& o, Mt19937& gen) {
  if (o.in_channels < 1 || o.out_channels < 1) {
    return absl::InvalidArgumentError(absl::StrCat("Conv2d: channels must be >= 1, got in=",
                                                   o.in_channels, " out=", o.out_channels));
  }
  std::unique_ptr<Conv2d> conv(new Conv2d(o));
  // Validates the window (a 1x1 image is the smallest the kernel may not fit,
  // so check the arguments alone here).
  if (o.kernel_h < 1 || o.kernel_w < 1 || o.stride_h < 1 || o.stride_w < 1 || o.pad_h < 0 ||
      o.pad_w < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Conv2d: need kernel >= 1, stride >= 1, padding >= 0; got kernel ", o.kernel_h, "x",
        o.kernel_w, ", stride ", o.stride_h, "x", o.stride_w, ", padding ", o.pad_h, "x", o.pad_w));
  }
  const int64_t fan_in = o.in_channels * o.kernel_h * o.kernel_w;
  LOCKSTEP_ASSIGN_OR_RETURN(
      conv->weight_.value,
      Tensor::Empty({o.out_channels, o.in_channels, o.kernel_h, o.kernel_w}, DType::kF32, o.device));
  const double bound = KaimingUniformBound(fan_in, std::sqrt(5.0));
  LOCKSTEP_RETURN_IF_ERROR(UniformFill(conv->weight_.value, -bound, bound, gen));
  conv->RegisterParameter("weight", &conv->weight_);
  if (o.bias) {
    LOCKSTEP_ASSIGN_OR_RETURN(conv->bias_.value, Tensor::Empty({o.out_channels}, DType::kF32, o.device));
    const double b = 1.0 / std::sqrt(static_cast<double>(fan_in));
    LOCKSTEP_RETURN_IF_ERROR(UniformFill(conv->bias_.value, -b, b, gen));
    conv->RegisterParameter("bias", &conv->bias_);
  }
  if (o.device.is_cpu()) conv->kernels_ = nn_internal::ConvKernels::Create();
  if (o.device.is_cuda()) conv->kernels_ = nn_internal::CreateCudnnConvKernels(o.device.index());
  return conv;
}

nn_internal::ConvShape Conv2d::ShapeFor(const Tensor& input, const Shape& out_hw) const {
  return nn_internal::ConvShape{input.shape()[0], options_.in_channels, input.shape()[2], input.shape()[3],
                                options_.out_channels, options_.kernel_h, options_.kernel_w, options_.stride_h,
                                options_.stride_w, options_.pad_h, options_.pad_w, out_hw[0], out_hw[1],
                                options_.bias};
}

std::string Conv2d::CpuKernels() { return nn_internal::ConvKernels::Description(); }

std::string Conv2d::CudaKernels() { return nn_internal::CudnnConvDescription(); }

Window2d Conv2d::window() const {
  return Window2d{options_.kernel_h, options_.kernel_w, options_.stride_h,
                  options_.stride_w, options_.pad_h,    options_.pad_w};
}

absl::StatusOr<std::unique_ptr<Module>> Conv2d::NewLike(Device device) const {
  Conv2dOptions options = options_;
  options.device = device;
  Mt19937 unused(0);  // values are overwritten by CloneTo
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Conv2d> copy, Create(options, unused));
  return std::unique_ptr<Module>(std::move(copy));
}

absl::StatusOr<Tensor> Conv2d::Ones(int64_t count, Shape shape) {
  if (!ones_.defined() || ones_.numel() != count) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor host, Tensor::FromVector<float>(
                                               std::vector<float>(static_cast<size_t>(count), 1.0f)));
    LOCKSTEP_ASSIGN_OR_RETURN(ones_, host.To(weight_.value.device()));
  }
  return ones_.Reshape(std::move(shape));
}

absl::StatusOr<Tensor> Conv2d::Forward(const Tensor& input) {
  const Device device = weight_.value.device();
  if (!input.defined() || input.dim() != 4 || input.dtype() != DType::kF32 ||
      input.shape()[1] != options_.in_channels || input.device() != device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Conv2d(", options_.in_channels, " -> ", options_.out_channels, ").Forward: expected f32 [batch, ",
        options_.in_channels, ", height, width] on ", device.ToString(), ", got ",
        input.defined() ? input.DebugString() : "undefined"));
  }
  const int64_t n = input.shape()[0], h = input.shape()[2], w = input.shape()[3];
  LOCKSTEP_ASSIGN_OR_RETURN(Shape out_hw, WindowOutputSize(h, w, window()));
  const int64_t positions = out_hw[0] * out_hw[1];
  const int64_t ckk = options_.in_channels * options_.kernel_h * options_.kernel_w;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor y, Tensor::Empty({n, options_.out_channels, out_hw[0], out_hw[1]},
                                                    DType::kF32, device));
  if (kernels_ != nullptr && n > 0) {
    // The whole batch in one oneDNN primitive.
    LOCKSTEP_RETURN_IF_ERROR(kernels_->Forward(ShapeFor(input, out_hw), input.data<float>(),
                                               weight_.value.data<float>(),
                                               options_.bias ? bias_.value.data<float>() : nullptr, y.data<float>()));
    saved_input_ = input;
    return y;
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor columns, Tensor::Empty({ckk, positions}, DType::kF32, device));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor w2d, weight_.value.Reshape({options_.out_channels, ckk}));
  for (int64_t i = 0; i < n; ++i) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor image, input.Slice(i, i + 1));
    LOCKSTEP_ASSIGN_OR_RETURN(image, image.Reshape({options_.in_channels, h, w}));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor yi, y.Slice(i, i + 1));
    LOCKSTEP_ASSIGN_OR_RETURN(yi, yi.Reshape({options_.out_channels, positions}));
    LOCKSTEP_RETURN_IF_ERROR(Im2Col(image, window(), columns));
    float beta = 0.0f;
    if (options_.bias) {  // y_i = b 1^T, then y_i += W columns
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor ones, Ones(positions, {1, positions}));
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor b, bias_.value.Reshape({options_.out_channels, 1}));
      LOCKSTEP_RETURN_IF_ERROR(Gemm(b, false, ones, false, yi));
      beta = 1.0f;
    }
    LOCKSTEP_RETURN_IF_ERROR(Gemm(w2d, false, columns, false, yi, 1.0f, beta));
  }
  saved_input_ = input;
  return y;
}

absl::StatusOr<Tensor> Conv2d::BackwardImpl(const Tensor& grad_output, bool input_grad,
                                            const ParameterReadyFn& ready) {
  if (!saved_input_.defined()) {
    return absl::FailedPreconditionError(
        "Conv2d.Backward: no pending Forward (each Backward consumes the last Forward)");
  }
  const Tensor x = std::exchange(saved_input_, Tensor());
  const Device device = x.device();
  const int64_t n = x.shape()[0], h = x.shape()[2], w = x.shape()[3];
  LOCKSTEP_ASSIGN_OR_RETURN(Shape out_hw, WindowOutputSize(h, w, window()));
  const Shape expected = {n, options_.out_channels, out_hw[0], out_hw[1]};
  if (!grad_output.defined() || grad_output.shape() != expected ||
      grad_output.dtype() != DType::kF32 || grad_output.device() != device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Conv2d.Backward: expected an f32 gradient of shape ", ShapeToString(expected), ", got ",
        grad_output.defined() ? grad_output.DebugString() : "undefined"));
  }
  const int64_t positions = out_hw[0] * out_hw[1];
  const int64_t ckk = options_.in_channels * options_.kernel_h * options_.kernel_w;
  const int64_t out = options_.out_channels;
  if (kernels_ != nullptr && n > 0) {
    const nn_internal::ConvShape shape = ShapeFor(x, out_hw);
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor gw, Tensor::Empty(weight_.value.shape(), DType::kF32, device));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor gb, Tensor::Empty({out}, DType::kF32, device));
    // Reverse registration order: bias, then weight, then the input.
    if (weight_.requires_grad || (options_.bias && bias_.requires_grad)) {
      LOCKSTEP_RETURN_IF_ERROR(kernels_->BackwardWeights(shape, x.data<float>(), grad_output.data<float>(),
                                                         gw.data<float>(), options_.bias ? gb.data<float>() : nullptr));
    }
    if (options_.bias) LOCKSTEP_RETURN_IF_ERROR(AccumulateGrad(bias_, gb, ready));
    LOCKSTEP_RETURN_IF_ERROR(AccumulateGrad(weight_, gw, ready));
    if (!input_grad) return Tensor();
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor gx, Tensor::Empty(x.shape(), DType::kF32, device));
    LOCKSTEP_RETURN_IF_ERROR(
        kernels_->BackwardData(shape, grad_output.data<float>(), weight_.value.data<float>(), gx.data<float>()));
    return gx;
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor columns, Tensor::Empty({ckk, positions}, DType::kF32, device));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor gw, Tensor::Empty({out, ckk}, DType::kF32, device));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor gb, Tensor::Empty({out, 1}, DType::kF32, device));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor w2d, weight_.value.Reshape({out, ckk}));
  Tensor gx, gcol;
  if (input_grad) {
    LOCKSTEP_ASSIGN_OR_RETURN(gx, Tensor::Empty(x.shape(), DType::kF32, device));
    LOCKSTEP_ASSIGN_OR_RETURN(gcol, Tensor::Empty({ckk, positions}, DType::kF32, device));
  }
  for (int64_t i = 0; i < n; ++i) {
    const float beta = i == 0 ? 0.0f : 1.0f;  // sums over the batch
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor image, x.Slice(i, i + 1));
    LOCKSTEP_ASSIGN_OR_RETURN(image, image.Reshape({options_.in_channels, h, w}));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor gi, grad_output.Slice(i, i + 1));
    LOCKSTEP_ASSIGN_OR_RETURN(gi, gi.Reshape({out, positions}));
    if (weight_.requires_grad) {  // Frozen: neither the columns nor the GEMM.
      LOCKSTEP_RETURN_IF_ERROR(Im2Col(image, window(), columns));
      LOCKSTEP_RETURN_IF_ERROR(Gemm(gi, false, columns, true, gw, 1.0f, beta));
    }
    if (options_.bias && bias_.requires_grad) {
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor ones, Ones(positions, {positions, 1}));
      LOCKSTEP_RETURN_IF_ERROR(Gemm(gi, false, ones, false, gb, 1.0f, beta));
    }
    if (input_grad) {
      LOCKSTEP_RETURN_IF_ERROR(Gemm(w2d, true, gi, false, gcol));
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor gxi, gx.Slice(i, i + 1));
      LOCKSTEP_ASSIGN_OR_RETURN(gxi, gxi.Reshape({options_.in_channels, h, w}));
      LOCKSTEP_RETURN_IF_ERROR(Col2Im(gcol, window(), gxi));
    }
  }
  if (n == 0) {
    LOCKSTEP_RETURN_IF_ERROR(gw.SetZero());
    LOCKSTEP_RETURN_IF_ERROR(gb.SetZero());
  }
  if (options_.bias) LOCKSTEP_RETURN_IF_ERROR(AccumulateGrad(bias_, gb, ready));
  LOCKSTEP_RETURN_IF_ERROR(AccumulateGrad(weight_, gw, ready));
  return gx;
}

}  // namespace lockstep
