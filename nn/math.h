// The math under the nn layers, on CPU tensors (OpenBLAS) and CUDA tensors
// (cuBLAS and small kernels), dispatched on the tensors' device.
//
//   // y[128, 512] = x[128, 784] * w[512, 784]^T
//   LOCKSTEP_RETURN_IF_ERROR(Gemm(x, false, w, true, y));
//   LOCKSTEP_RETURN_IF_ERROR(Relu(y, y));
//
// Tensors are 2-D and row-major for Gemm, any shape for the elementwise ops.
// f32 and f64 GEMMs run natively. f16 and bf16 GEMMs accumulate in f32 and
// round the result once: on CUDA through cublasGemmEx, on CPU by widening
// the operands to f32 (exactly), calling sgemm and rounding. Every function
// validates dtypes, shapes and devices first (InvalidArgument naming the
// operation and the tensor), and completes before returning.
//
// CPU GEMMs use one OpenBLAS thread per process unless SetCpuMathThreads or
// the OPENBLAS_NUM_THREADS environment variable says otherwise: data-parallel
// training runs a process per core, and oversubscribed BLAS threads slow it.
#ifndef LOCKSTEP_NN_MATH_H_
#define LOCKSTEP_NN_MATH_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace lockstep {

// c = alpha * op(a) * op(b) + beta * c, op(x) = x^T when its flag is set.
// op(a) is [m, k], op(b) [k, n], c [m, n]; all of one floating dtype and one
// device. With beta == 0, c's old contents are ignored (NaNs included).
absl::Status Gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, float alpha = 1.0f,
                  float beta = 0.0f);

// Sets the OpenBLAS thread count for this process (>= 1).
absl::Status SetCpuMathThreads(int threads);

// `t` in `dtype`: t itself when it already is, else a new tensor on t's
// device holding the values cast (rounded to nearest even when narrowing):
// autocast's copies of a layer's operands.
absl::StatusOr<Tensor> CastTo(const Tensor& t, DType dtype);

// out = max(in, 0), NaN kept (PyTorch's relu). `out` may be `in`.
absl::Status Relu(const Tensor& in, const Tensor& out);
// grad_in = out > 0 ? grad_out : 0, from relu's output (PyTorch's
// threshold_backward). `grad_in` may be `grad_out`.
absl::Status ReluBackward(const Tensor& grad_out, const Tensor& out, const Tensor& grad_in);

// out = keep ? in * scale : 0 with keep decided per element by a
// counter-based hash of (seed, offset, index) with probability
// keep_probability, and scale = 1 / keep_probability. The same (seed, offset)
// gives the same mask on every device, so backward reapplies it to the
// gradient without storing it. 0 < keep_probability <= 1.
absl::Status DropoutApply(const Tensor& in, const Tensor& out, double keep_probability, uint64_t seed, uint64_t offset);

// A sliding window over [channels, height, width] images, for Conv2d (via
// im2col + GEMM) and MaxPool2d. f32 tensors only.
struct Window2d {
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
};

// [out_h, out_w] = floor((in + 2 pad - kernel) / stride) + 1 per dimension;
// an error when the window does not fit or an argument is out of range.
absl::StatusOr<Shape> WindowOutputSize(int64_t height, int64_t width, const Window2d& window);

// columns [C * kh * kw, out_h * out_w] = the image [C, H, W] unfolded
// (torch.nn.functional.unfold of one image), zeros where the window covers
// padding.
absl::Status Im2Col(const Tensor& image, const Window2d& window, const Tensor& columns);
// The adjoint of Im2Col: image [C, H, W] = the sum of the column entries
// taken from each pixel (torch.nn.functional.fold).
absl::Status Col2Im(const Tensor& columns, const Window2d& window, const Tensor& image);

// out [N, C, out_h, out_w] = window maxima of in [N, C, H, W], with the
// winner's index (ih * W + iw, i32) in `indices`, as PyTorch's CPU
// max_pool2d (first maximum; NaN propagates).
absl::Status MaxPool2dForward(const Tensor& in, const Window2d& window, const Tensor& out, const Tensor& indices);
// grad_in [N, C, H, W] = each window's gradient routed to its winner.
absl::Status MaxPool2dBackward(const Tensor& grad_out, const Tensor& indices, const Window2d& window,
                               const Tensor& grad_in);

}  // namespace lockstep

#endif  // LOCKSTEP_NN_MATH_H_
