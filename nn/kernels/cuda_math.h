// The CUDA side of nn/math.h: cuBLAS GEMM and the elementwise kernels of
// nn/kernels/nn_cuda_kernels.cu, on raw device pointers. nn/math.cc validates
// arguments and dispatches here for CUDA tensors. The BUILD file picks the
// implementation (nn/kernels/cuda_math_cuda.cc, or nn/kernels/cuda_math_none.cc
// whose calls all fail with FailedPrecondition). Every call completes before returning.
#ifndef LOCKSTEP_NN_KERNELS_CUDA_MATH_H_
#define LOCKSTEP_NN_KERNELS_CUDA_MATH_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/dtype.h"
#include "nn/kernels/nn_elementwise.h"
#include "nn/kernels/window_elementwise.h"

namespace lockstep {
namespace nn_cuda {

// Row-major C[m, n] = alpha * op(A) op(B) + beta * C with op(A) [m, k] and
// op(B) [k, n]; f32 and f64 natively, f16 and bf16 with f32 accumulation
// (cublasGemmEx).
absl::Status Gemm(int device, DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const void* a, const void* b, float beta, void* c);

absl::Status Relu(int device, DType dtype, const void* in, void* out, int64_t count);
absl::Status ReluBackward(int device, DType dtype, const void* grad_out, const void* out, void* grad_in, int64_t count);
absl::Status Dropout(int device, DType dtype, const void* in, void* out, int64_t count, uint64_t seed, uint64_t offset,
                     uint32_t keep_threshold24, float scale);
absl::Status Sgd(int device, const nn_elementwise::SgdParams& params, const nn_elementwise::SgdFlags& flags, float* p,
                 const float* g, float* buf, int64_t count);
absl::Status Adam(int device, const nn_elementwise::AdamParams& params, const nn_elementwise::AdamFlags& flags,
                  float* p, const float* g, float* m, float* v, float* v_max, int64_t count);

absl::Status Im2Col(int device, const window_elementwise::Geometry& g, const float* image, float* columns);
absl::Status Col2Im(int device, const window_elementwise::Geometry& g, const float* columns, float* image);
absl::Status MaxPool(int device, const window_elementwise::Geometry& g, int64_t images, const float* in, float* out,
                     int32_t* indices);
absl::Status MaxPoolBackward(int device, const window_elementwise::Geometry& g, int64_t images, const float* grad_out,
                             const int32_t* indices, float* grad_in);

// BatchNorm over [n, c, s] f32 data on the device (x, dy, y, dx); the
// per-channel arrays ([c]: mean, alpha, ...) and per-plane results ([n * c],
// plane = image * c + channel) are on the host and copied here. The
// arithmetic is nn/kernels/batch_norm_elementwise.h's, as on the CPU.
// out[plane] = sum x (mean null) or sum (x - mean[channel])^2.
absl::Status BatchNormPlaneSums(int device, int64_t n, int64_t c, int64_t s, const float* x, const float* mean,
                                double* out);
// sum[plane] = sum dy, dot[plane] = sum (x - mean[channel]) dy.
absl::Status BatchNormPlaneGradSums(int device, int64_t n, int64_t c, int64_t s, const float* x, const float* dy,
                                    const float* mean, double* sum, double* dot);
// y = x alpha[channel] + beta[channel].
absl::Status BatchNormTransform(int device, int64_t n, int64_t c, int64_t s, const float* x, const float* alpha,
                                const float* beta, float* y);
// dx with batch statistics (k and grad_mean non-null), else dy (invstd w).
absl::Status BatchNormInputGrad(int device, int64_t n, int64_t c, int64_t s, const float* x, const float* dy,
                                const float* mean, const float* invstd, const float* w, const double* k,
                                const double* grad_mean, float* dx);

}  // namespace nn_cuda
}  // namespace lockstep

#endif  // LOCKSTEP_NN_KERNELS_CUDA_MATH_H_
