// Plain entry points into nn/kernels/nn_cuda_kernels.cu (dtype as the integer value
// of core/dtype.h, cudaError_t returned as int), wrapped by
// nn/kernels/cuda_math_cuda.cc. All run on the legacy default stream.
#ifndef LOCKSTEP_NN_KERNELS_NN_CUDA_LAUNCH_H_
#define LOCKSTEP_NN_KERNELS_NN_CUDA_LAUNCH_H_

#include <cstdint>

#include "nn/kernels/nn_elementwise.h"
#include "nn/kernels/window_elementwise.h"

namespace lockstep {
namespace nn_cuda_internal {

int LaunchRelu(int dtype, const void* in, void* out, int64_t count);
int LaunchReluBackward(int dtype, const void* grad_out, const void* out, void* grad_in, int64_t count);
int LaunchDropout(int dtype, const void* in, void* out, int64_t count, uint64_t seed, uint64_t offset,
                  uint32_t keep_threshold24, float scale);
int LaunchSgd(const nn_elementwise::SgdParams& params, const nn_elementwise::SgdFlags& flags, float* p, const float* g,
              float* buf, int64_t count);
int LaunchAdam(const nn_elementwise::AdamParams& params, const nn_elementwise::AdamFlags& flags, float* p,
               const float* g, float* m, float* v, float* v_max, int64_t count);

// `images` images of g.channels x g.height x g.width, one after another.
int LaunchIm2Col(const window_elementwise::Geometry& g, const float* image, float* columns);
int LaunchCol2Im(const window_elementwise::Geometry& g, const float* columns, float* image);
int LaunchMaxPool(const window_elementwise::Geometry& g, int64_t images, const float* in, float* out, int32_t* indices);
int LaunchMaxPoolBackward(const window_elementwise::Geometry& g, int64_t images, const float* grad_out,
                          const int32_t* indices, float* grad_in);

// BatchNorm over [n, c, s] f32 data, planes = n * c; every pointer is on the
// device, per-channel arrays [c], per-plane ones [planes].
// out[p] = sum x (mean null) or sum (x - mean[channel])^2 over plane p.
int LaunchBatchNormPlaneSums(int64_t planes, int64_t c, int64_t s, const float* x, const float* mean, double* out);
// sum[p] = sum dy, dot[p] = sum (x - mean[channel]) dy over plane p.
int LaunchBatchNormPlaneGradSums(int64_t planes, int64_t c, int64_t s, const float* x, const float* dy,
                                 const float* mean, double* sum, double* dot);
// y = x alpha[channel] + beta[channel]; count = planes * s.
int LaunchBatchNormTransform(int64_t count, int64_t c, int64_t s, const float* x, const float* alpha, const float* beta,
                             float* y);
// dx with batch statistics (k and grad_mean non-null), or dy invstd w.
int LaunchBatchNormInputGrad(int64_t count, int64_t c, int64_t s, const float* x, const float* dy, const float* mean,
                             const float* invstd, const float* w, const double* k, const double* grad_mean, float* dx);

}  // namespace nn_cuda_internal
}  // namespace lockstep

#endif  // LOCKSTEP_NN_KERNELS_NN_CUDA_LAUNCH_H_
