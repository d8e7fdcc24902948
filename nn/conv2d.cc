#include "nn/conv2d.h"

#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/kernels.h"
#include "core/status.h"
#include "nn/init.h"
#include "nn/kernels/cudnn_conv_kernels.h"

namespace lockstep {
namespace {

bool IsComputeDType(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }

}  // namespace

absl::StatusOr<std::unique_ptr<Conv2d>> Conv2d::Create(const Conv2dOptions& o, Mt19937& gen) {
  if (o.in_channels < 1 || o.out_channels < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Conv2d: channels must be >= 1, got in=", o.in_channels, " out=", o.out_channels));
  }
  if (!IsComputeDType(o.compute_dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Conv2d: compute dtype must be f32, bf16 or f16, got ", DTypeName(o.compute_dtype)));
  }
  std::unique_ptr<Conv2d> conv(new Conv2d(o));
  // Validates the window (a 1x1 image is the smallest the kernel may not fit,
  // so check the arguments alone here).
  if (o.kernel_h < 1 || o.kernel_w < 1 || o.stride_h < 1 || o.stride_w < 1 || o.pad_h < 0 || o.pad_w < 0) {
    return absl::InvalidArgumentError(absl::StrCat("Conv2d: need kernel >= 1, stride >= 1, padding >= 0; got kernel ",
                                                   o.kernel_h, "x", o.kernel_w, ", stride ", o.stride_h, "x",
                                                   o.stride_w, ", padding ", o.pad_h, "x", o.pad_w));
  }
  const int64_t fan_in = o.in_channels * o.kernel_h * o.kernel_w;
  LOCKSTEP_ASSIGN_OR_RETURN(conv->weight_.value, Tensor::Empty({o.out_channels, o.in_channels, o.kernel_h, o.kernel_w},
                                                               DType::kF32, o.device));
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
  return nn_internal::ConvShape{input.shape()[0],  options_.in_channels,  input.shape()[2],
                                input.shape()[3],  options_.out_channels, options_.kernel_h,
                                options_.kernel_w, options_.stride_h,     options_.stride_w,
                                options_.pad_h,    options_.pad_w,        out_hw[0],
                                out_hw[1],         options_.bias,         options_.compute_dtype};
}

absl::Status Conv2d::set_compute_dtype(DType dtype) {
  if (!IsComputeDType(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Conv2d::set_compute_dtype: f32, bf16 or f16, got ", DTypeName(dtype)));
  }
  options_.compute_dtype = dtype;
  return absl::OkStatus();
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
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor host,
                              Tensor::FromVector<float>(std::vector<float>(static_cast<size_t>(count), 1.0f)));
    LOCKSTEP_ASSIGN_OR_RETURN(ones_, host.To(weight_.value.device()));
  }
  return ones_.Reshape(std::move(shape));
}

absl::StatusOr<Tensor> Conv2d::Forward(const Tensor& input) {
  const Device device = weight_.value.device();
  if (!input.defined() || input.dim() != 4 || !IsComputeDType(input.dtype()) ||
      input.shape()[1] != options_.in_channels || input.device() != device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Conv2d(", options_.in_channels, " -> ", options_.out_channels,
        ").Forward: expected an f32, bf16 or f16 [batch, ", options_.in_channels, ", height, width] tensor on ",
        device.ToString(), ", got ", input.defined() ? input.DebugString() : "undefined"));
  }
  const DType dtype = options_.compute_dtype;
  const int64_t n = input.shape()[0], h = input.shape()[2], w = input.shape()[3];
  LOCKSTEP_ASSIGN_OR_RETURN(Shape out_hw, WindowOutputSize(h, w, window()));
  const Shape out_shape = {n, options_.out_channels, out_hw[0], out_hw[1]};
  // The operands rounded to the compute dtype (autocast's copies; f32: the
  // tensors themselves).
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor x, CastTo(input, dtype));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor wc, CastTo(weight_.value, dtype));
  Tensor bc;
  if (options_.bias) {
    LOCKSTEP_ASSIGN_OR_RETURN(bc, CastTo(bias_.value, dtype));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor y, Tensor::Empty(out_shape, dtype, device));
  if (kernels_ != nullptr && kernels_->Supports(dtype) && n > 0) {
    // The whole batch in one primitive.
    LOCKSTEP_RETURN_IF_ERROR(kernels_->Forward(ShapeFor(x, out_hw), x.raw_data(), wc.raw_data(),
                                               options_.bias ? bc.raw_data() : nullptr, y.raw_data()));
  } else {
    // im2col + GEMM per image, in f32: rounded operands widen exactly, the
    // f32 sums are what the kernels accumulate, and y is rounded once.
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor x32, CastTo(x, DType::kF32));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor w32, CastTo(wc, DType::kF32));
    Tensor b32;
    if (options_.bias) {
      LOCKSTEP_ASSIGN_OR_RETURN(b32, CastTo(bc, DType::kF32));
    }
    Tensor y32 = y;
    if (dtype != DType::kF32) {
      LOCKSTEP_ASSIGN_OR_RETURN(y32, Tensor::Empty(out_shape, DType::kF32, device));
    }
    LOCKSTEP_RETURN_IF_ERROR(Im2ColForward(x32, w32, b32, y32));
    if (dtype != DType::kF32) LOCKSTEP_RETURN_IF_ERROR(Cast(y32, y));
  }
  saved_input_ = x;
  saved_weight_ = wc;
  saved_input_dtype_ = input.dtype();
  return y;
}

absl::Status Conv2d::Im2ColForward(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& y) {
  const Device device = input.device();
  const int64_t n = input.shape()[0], h = input.shape()[2], w = input.shape()[3];
  const int64_t out_h = y.shape()[2], out_w = y.shape()[3], positions = out_h * out_w;
  const int64_t ckk = options_.in_channels * options_.kernel_h * options_.kernel_w;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor columns, Tensor::Empty({ckk, positions}, DType::kF32, device));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor w2d, weight.Reshape({options_.out_channels, ckk}));
  for (int64_t i = 0; i < n; ++i) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor image, input.Slice(i, i + 1));
    LOCKSTEP_ASSIGN_OR_RETURN(image, image.Reshape({options_.in_channels, h, w}));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor yi, y.Slice(i, i + 1));
    LOCKSTEP_ASSIGN_OR_RETURN(yi, yi.Reshape({options_.out_channels, positions}));
    LOCKSTEP_RETURN_IF_ERROR(Im2Col(image, window(), columns));
    float beta = 0.0f;
    if (options_.bias) {  // y_i = b 1^T, then y_i += W columns
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor ones, Ones(positions, {1, positions}));
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor b, bias.Reshape({options_.out_channels, 1}));
      LOCKSTEP_RETURN_IF_ERROR(Gemm(b, false, ones, false, yi));
      beta = 1.0f;
    }
    LOCKSTEP_RETURN_IF_ERROR(Gemm(w2d, false, columns, false, yi, 1.0f, beta));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Conv2d::BackwardImpl(const Tensor& grad_output, bool input_grad, const ParameterReadyFn& ready) {
  if (!saved_input_.defined()) {
    return absl::FailedPreconditionError(
        "Conv2d.Backward: no pending Forward (each Backward consumes the last Forward)");
  }
  const Device device = saved_input_.device();
  const int64_t n = saved_input_.shape()[0], h = saved_input_.shape()[2], w = saved_input_.shape()[3];
  LOCKSTEP_ASSIGN_OR_RETURN(Shape out_hw, WindowOutputSize(h, w, window()));
  const Shape expected = {n, options_.out_channels, out_hw[0], out_hw[1]};
  // Checked before the Forward is consumed: a refused gradient loses nothing.
  if (!grad_output.defined() || grad_output.shape() != expected || !IsComputeDType(grad_output.dtype()) ||
      grad_output.device() != device) {
    return absl::InvalidArgumentError(absl::StrCat("Conv2d.Backward: expected an f32, bf16 or f16 gradient of shape ",
                                                   ShapeToString(expected), " on ", device.ToString(), ", got ",
                                                   grad_output.defined() ? grad_output.DebugString() : "undefined"));
  }
  const Tensor x = std::exchange(saved_input_, Tensor());
  const Tensor wc = std::exchange(saved_weight_, Tensor());
  const DType dtype = x.dtype();  // the compute dtype of that Forward
  const int64_t out = options_.out_channels;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor g, CastTo(grad_output, dtype));
  // The gradients in the compute dtype (bf16 ones rounded once), as
  // autocast's bf16 weight copy receives them.
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor gw, Tensor::Empty(wc.shape(), dtype, device));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor gb, Tensor::Empty({out}, dtype, device));
  Tensor gx;
  if (input_grad) {
    LOCKSTEP_ASSIGN_OR_RETURN(gx, Tensor::Empty(x.shape(), dtype, device));
  }
  const bool weights = weight_.requires_grad || (options_.bias && bias_.requires_grad);
  if (kernels_ != nullptr && kernels_->Supports(dtype) && n > 0) {
    const nn_internal::ConvShape shape = ShapeFor(x, out_hw);
    if (weights) {
      LOCKSTEP_RETURN_IF_ERROR(kernels_->BackwardWeights(shape, x.raw_data(), g.raw_data(), gw.raw_data(),
                                                         options_.bias ? gb.raw_data() : nullptr));
    }
    // Reverse registration order: bias, then weight, then the input.
    if (options_.bias) LOCKSTEP_RETURN_IF_ERROR(AccumulateGrad(bias_, gb, ready));
    LOCKSTEP_RETURN_IF_ERROR(AccumulateGrad(weight_, gw, ready));
    if (!input_grad) return Tensor();
    LOCKSTEP_RETURN_IF_ERROR(kernels_->BackwardData(shape, g.raw_data(), wc.raw_data(), gx.raw_data()));
    return CastTo(gx, saved_input_dtype_);
  }
  // The fallback in f32 (see Forward), the results rounded once.
  const bool f32 = dtype == DType::kF32;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor x32, CastTo(x, DType::kF32));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor w32, CastTo(wc, DType::kF32));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor g32, CastTo(g, DType::kF32));
  Tensor gw32 = gw, gb32 = gb, gx32 = gx;
  if (!f32) {
    LOCKSTEP_ASSIGN_OR_RETURN(gw32, Tensor::Empty(wc.shape(), DType::kF32, device));
    LOCKSTEP_ASSIGN_OR_RETURN(gb32, Tensor::Empty({out}, DType::kF32, device));
    if (input_grad) {
      LOCKSTEP_ASSIGN_OR_RETURN(gx32, Tensor::Empty(x.shape(), DType::kF32, device));
    }
  }
  LOCKSTEP_RETURN_IF_ERROR(Im2ColBackward(x32, w32, g32, gw32, gb32, gx32));
  if (!f32) {
    LOCKSTEP_RETURN_IF_ERROR(Cast(gw32, gw));
    LOCKSTEP_RETURN_IF_ERROR(Cast(gb32, gb));
    if (input_grad) LOCKSTEP_RETURN_IF_ERROR(Cast(gx32, gx));
  }
  if (options_.bias) LOCKSTEP_RETURN_IF_ERROR(AccumulateGrad(bias_, gb, ready));
  LOCKSTEP_RETURN_IF_ERROR(AccumulateGrad(weight_, gw, ready));
  if (!input_grad) return Tensor();
  return CastTo(gx, saved_input_dtype_);
}

absl::Status Conv2d::Im2ColBackward(const Tensor& x, const Tensor& weight, const Tensor& grad_output,
                                    const Tensor& gw_out, const Tensor& gb_out, const Tensor& gx) {
  const Device device = x.device();
  const int64_t n = x.shape()[0], h = x.shape()[2], w = x.shape()[3];
  const int64_t positions = grad_output.shape()[2] * grad_output.shape()[3];
  const int64_t ckk = options_.in_channels * options_.kernel_h * options_.kernel_w;
  const int64_t out = options_.out_channels;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor columns, Tensor::Empty({ckk, positions}, DType::kF32, device));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor gw, gw_out.Reshape({out, ckk}));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor gb, gb_out.Reshape({out, 1}));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor w2d, weight.Reshape({out, ckk}));
  Tensor gcol;
  if (gx.defined()) {
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
    if (gx.defined()) {
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
  return absl::OkStatus();
}

}  // namespace lockstep
