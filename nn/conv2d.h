// Conv2d: 2-D convolution over [batch, channels, height, width] tensors
// (torch.nn.Conv2d with groups = 1, dilation = 1). On the CPU the whole
// batch goes through oneDNN's direct convolution when lockstep is built with
// oneDNN (@local_dnnl: Debian's libdnnl-dev, the one PyTorch links), and on
// CUDA through cuDNN when the toolkit has it (full f32, no FFT or Winograd:
// nn/kernels/cudnn_conv_kernels.h); else im2col + GEMM per image
// (OpenBLAS, cuBLAS). CpuKernels() and CudaKernels() say which, for
// start-up lines.
//
//   Conv2dOptions options;
//   options.in_channels = 1;
//   options.out_channels = 8;
//   options.kernel_h = options.kernel_w = 3;
//   options.pad_h = options.pad_w = 1;
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Conv2d> conv, Conv2d::Create(options, gen));
//
// "weight" [out, in, kh, kw] and "bias" [out] are initialized as PyTorch's
// (kaiming_uniform_(a=sqrt(5)) and uniform(+-1/sqrt(fan_in)), fan_in = in *
// kh * kw, in that order, from `gen`). Forward keeps the input; backward
// computes the weight and bias gradients over the whole batch (the
// fallback recomputes the columns: memory over time), fires the
// gradient-ready hook (bias, then weight) and returns the input gradient.
// With oneDNN, the primitives of each input shape are made once and kept,
// and the backward reuses the forward's reordered input and weights.
//
// With compute_dtype bf16 or f16 (autocast, as torch.autocast runs
// conv2d): forward rounds the input, weight and bias to that dtype,
// accumulates in f32 and returns the output in that dtype; backward computes
// the gradients in that dtype too and accumulates the weight and bias ones
// into the f32 `grad`s; the input gradient comes back in the input's dtype.
// bf16 runs on oneDNN (CPU) and cuDNN (CUDA), f16 on cuDNN; elsewhere the
// im2col fallback gives the same numbers (the rounded operands widened to
// f32 exactly, f32 GEMMs, the results rounded once). Input: f32, bf16 or
// f16.
#ifndef LOCKSTEP_NN_CONV2D_H_
#define LOCKSTEP_NN_CONV2D_H_

#include <cstdint>
#include <memory>
#include <string>

#include "core/device.h"
#include "core/dtype.h"
#include "core/mt19937.h"
#include "nn/kernels/conv_kernels.h"
#include "nn/math.h"
#include "nn/module.h"

namespace lockstep {

struct Conv2dOptions {
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  bool bias = true;
  DType compute_dtype = DType::kF32;  // f32, bf16 or f16
  Device device = Device::Cpu();
};

class Conv2d : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<Conv2d>> Create(const Conv2dOptions& options, Mt19937& gen);

  absl::string_view type_name() const override { return "Conv2d"; }
  absl::StatusOr<Tensor> Forward(const Tensor& input) override;

  Parameter& weight() { return weight_; }
  Parameter& bias() { return bias_; }
  const Conv2dOptions& options() const { return options_; }
  // f32, bf16 or f16 (the next Forward on).
  absl::Status set_compute_dtype(DType dtype);

  // "oneDNN 2.6.3 (avx512_core)", or the fallback and how to get oneDNN.
  static std::string CpuKernels();
  // "cuDNN 9.19.0 (full f32)", or the fallback and why.
  static std::string CudaKernels();

 protected:
  absl::StatusOr<Tensor> BackwardImpl(const Tensor& grad_output, bool input_grad,
                                      const ParameterReadyFn& ready) override;
  absl::StatusOr<std::unique_ptr<Module>> NewLike(Device device) const override;

 private:
  explicit Conv2d(const Conv2dOptions& options) : options_(options) {}
  Window2d window() const;
  // `count` ones on the module's device as `shape` (a row or a column; one
  // cached vector, reshaped without a copy).
  absl::StatusOr<Tensor> Ones(int64_t count, Shape shape);
  nn_internal::ConvShape ShapeFor(const Tensor& input, const Shape& out_hw) const;
  // The im2col + GEMM fallback on f32 tensors: y from input, weight and
  // bias (undefined without); the weight and bias gradients (written) and
  // gx (undefined: not asked) from x, weight and grad_output.
  absl::Status Im2ColForward(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& y);
  absl::Status Im2ColBackward(const Tensor& x, const Tensor& weight, const Tensor& grad_output, const Tensor& gw,
                              const Tensor& gb, const Tensor& gx);

  Conv2dOptions options_;
  Parameter weight_;
  Parameter bias_;
  // Saved by Forward for Backward: the input and weight in the compute dtype.
  Tensor saved_input_;
  Tensor saved_weight_;
  DType saved_input_dtype_ = DType::kF32;
  Tensor ones_;
  std::unique_ptr<nn_internal::ConvKernels> kernels_;  // oneDNN (CPU) or cuDNN (CUDA); null: im2col.
};

}  // namespace lockstep

#endif  // LOCKSTEP_NN_CONV2D_H_
