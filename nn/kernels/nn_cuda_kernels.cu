// CUDA versions of the nn elementwise kernels. The arithmetic is
// nn/kernels/nn_elementwise.h, shared with the CPU code (compiled with
// --fmad=false so both round identically). Grid-stride loops.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/cuda_grid.h"
#include "core/internal/elementwise.h"
#include "nn/kernels/batch_norm_elementwise.h"
#include "nn/kernels/nn_cuda_launch.h"
#include "nn/kernels/nn_elementwise.h"
#include "nn/kernels/window_elementwise.h"

namespace lockstep {
namespace nn_cuda_internal {
namespace {

namespace ew = ::lockstep::elementwise;
namespace nw = ::lockstep::nn_elementwise;
namespace bn = ::lockstep::batch_norm_elementwise;

using cuda_grid::Blocks;
using cuda_grid::kThreads;

template <typename T>
__global__ void ReluKernel(const T* in, T* out, int64_t count) {
  LOCKSTEP_GRID_LOOP(i, count) {
    const auto x = ew::Load(in[i]);
    out[i] = x > 0 || x != x ? in[i] : ew::Store<T>(0);
  }
}

template <typename T>
__global__ void ReluBackwardKernel(const T* grad_out, const T* out, T* grad_in, int64_t count) {
  LOCKSTEP_GRID_LOOP(i, count) {
    // As PyTorch's threshold_backward: zero where out <= 0 (NaN passes).
    grad_in[i] = ew::Load(out[i]) <= 0 ? ew::Store<T>(0) : grad_out[i];
  }
}

template <typename T>
__global__ void DropoutKernel(const T* in, T* out, int64_t count, uint64_t seed, uint64_t offset, uint32_t threshold,
                              float scale) {
  LOCKSTEP_GRID_LOOP(i, count) {
    const bool keep = nw::DropoutKeep(seed, offset, static_cast<uint64_t>(i), threshold);
    out[i] = ew::Store<T>(keep ? ew::Load(in[i]) * static_cast<ew::Acc<T>>(scale) : 0);
  }
}

__global__ void SgdKernel(nw::SgdParams params, nw::SgdFlags flags, float* p, const float* g, float* buf,
                          int64_t count) {
  LOCKSTEP_GRID_LOOP(i, count) {
    float unused = 0.0f;
    nw::SgdUpdate(params, flags, p[i], g[i], buf != nullptr ? buf[i] : unused);
  }
}

__global__ void AdamKernel(nw::AdamParams params, nw::AdamFlags flags, float* p, const float* g, float* m, float* v,
                           float* v_max, int64_t count) {
  LOCKSTEP_GRID_LOOP(i, count) {
    float unused = 0.0f;
    nw::AdamUpdate(params, flags, p[i], g[i], m[i], v[i], v_max != nullptr ? v_max[i] : unused);
  }
}

namespace we = ::lockstep::window_elementwise;

__global__ void Im2ColKernel(we::Geometry g, const float* image, float* columns, int64_t count) {
  LOCKSTEP_GRID_LOOP(i, count) { columns[i] = we::Im2ColAt(g, image, i); }
}

__global__ void Col2ImKernel(we::Geometry g, const float* columns, float* image, int64_t count) {
  LOCKSTEP_GRID_LOOP(i, count) { image[i] = we::Col2ImAt(g, columns, i); }
}

__global__ void MaxPoolKernel(we::Geometry g, const float* in, float* out, int32_t* indices, int64_t count) {
  const int64_t per_image = g.channels * g.out_h * g.out_w;
  LOCKSTEP_GRID_LOOP(i, count) {
    const int64_t n = i / per_image;
    out[i] = we::MaxPoolAt(g, in + n * g.channels * g.height * g.width, i % per_image, &indices[i]);
  }
}

__global__ void MaxPoolBackwardKernel(we::Geometry g, const float* grad_out, const int32_t* indices, float* grad_in,
                                      int64_t count) {
  const int64_t per_image = g.channels * g.height * g.width;
  const int64_t per_out = g.channels * g.out_h * g.out_w;
  LOCKSTEP_GRID_LOOP(i, count) {
    const int64_t n = i / per_image;
    grad_in[i] = we::MaxPoolBackwardAt(g, grad_out + n * per_out, indices + n * per_out, i % per_image);
  }
}

// One thread per plane (plane p = image * c + channel): the plane's sums in
// batch_norm_elementwise's lane order, so the CPU and the GPU add the same
// values in the same order.
__global__ void BatchNormPlaneSumsKernel(int64_t planes, int64_t c, int64_t s, const float* x, const float* mean,
                                         double* out) {
  LOCKSTEP_GRID_LOOP(p, planes) {
    const float* plane = x + p * s;
    out[p] = mean == nullptr ? bn::PlaneSum(plane, s) : bn::PlaneSquaredDeviations(plane, s, mean[p % c]);
  }
}

__global__ void BatchNormPlaneGradSumsKernel(int64_t planes, int64_t c, int64_t s, const float* x, const float* dy,
                                             const float* mean, double* sum, double* dot) {
  LOCKSTEP_GRID_LOOP(p, planes) {
    sum[p] = bn::PlaneSum(dy + p * s, s);
    dot[p] = bn::PlaneDot(x + p * s, dy + p * s, s, mean[p % c]);
  }
}

__global__ void BatchNormTransformKernel(int64_t count, int64_t c, int64_t s, const float* x, const float* alpha,
                                         const float* beta, float* y) {
  LOCKSTEP_GRID_LOOP(i, count) {
    const int64_t ch = (i / s) % c;
    y[i] = x[i] * alpha[ch] + beta[ch];
  }
}

__global__ void BatchNormInputGradKernel(int64_t count, int64_t c, int64_t s, const float* x, const float* dy,
                                         const float* mean, const float* invstd, const float* w, const double* k,
                                         const double* grad_mean, float* dx) {
  LOCKSTEP_GRID_LOOP(i, count) {
    const int64_t ch = (i / s) % c;
    if (k != nullptr) {
      dx[i] = bn::InputGradBatch(x[i], dy[i], mean[ch], k[ch], grad_mean[ch], invstd[ch], w[ch]);
    } else {
      const float scale = invstd[ch] * w[ch];
      dx[i] = dy[i] * scale;
    }
  }
}

int LastError() { return static_cast<int>(cudaPeekAtLastError()); }

}  // namespace

int LaunchRelu(int dtype, const void* in, void* out, int64_t count) {
  if (count == 0) return 0;
  return cuda_grid::VisitFloatDType(dtype, [&](auto zero) {
    using T = decltype(zero);
    ReluKernel<T><<<Blocks(count), kThreads>>>(static_cast<const T*>(in), static_cast<T*>(out), count);
    return LastError();
  });
}

int LaunchReluBackward(int dtype, const void* grad_out, const void* out, void* grad_in, int64_t count) {
  if (count == 0) return 0;
  return cuda_grid::VisitFloatDType(dtype, [&](auto zero) {
    using T = decltype(zero);
    ReluBackwardKernel<T><<<Blocks(count), kThreads>>>(static_cast<const T*>(grad_out), static_cast<const T*>(out),
                                                       static_cast<T*>(grad_in), count);
    return LastError();
  });
}

int LaunchDropout(int dtype, const void* in, void* out, int64_t count, uint64_t seed, uint64_t offset,
                  uint32_t keep_threshold24, float scale) {
  if (count == 0) return 0;
  return cuda_grid::VisitFloatDType(dtype, [&](auto zero) {
    using T = decltype(zero);
    DropoutKernel<T><<<Blocks(count), kThreads>>>(static_cast<const T*>(in), static_cast<T*>(out), count, seed, offset,
                                                  keep_threshold24, scale);
    return LastError();
  });
}

int LaunchSgd(const nw::SgdParams& params, const nw::SgdFlags& flags, float* p, const float* g, float* buf,
              int64_t count) {
  if (count == 0) return 0;
  SgdKernel<<<Blocks(count), kThreads>>>(params, flags, p, g, buf, count);
  return LastError();
}

int LaunchAdam(const nw::AdamParams& params, const nw::AdamFlags& flags, float* p, const float* g, float* m, float* v,
               float* v_max, int64_t count) {
  if (count == 0) return 0;
  AdamKernel<<<Blocks(count), kThreads>>>(params, flags, p, g, m, v, v_max, count);
  return LastError();
}

int LaunchIm2Col(const we::Geometry& g, const float* image, float* columns) {
  const int64_t count = g.channels * g.kernel_h * g.kernel_w * g.out_h * g.out_w;
  if (count == 0) return 0;
  Im2ColKernel<<<Blocks(count), kThreads>>>(g, image, columns, count);
  return LastError();
}

int LaunchCol2Im(const we::Geometry& g, const float* columns, float* image) {
  const int64_t count = g.channels * g.height * g.width;
  if (count == 0) return 0;
  Col2ImKernel<<<Blocks(count), kThreads>>>(g, columns, image, count);
  return LastError();
}

int LaunchMaxPool(const we::Geometry& g, int64_t images, const float* in, float* out, int32_t* indices) {
  const int64_t count = images * g.channels * g.out_h * g.out_w;
  if (count == 0) return 0;
  MaxPoolKernel<<<Blocks(count), kThreads>>>(g, in, out, indices, count);
  return LastError();
}

int LaunchMaxPoolBackward(const we::Geometry& g, int64_t images, const float* grad_out, const int32_t* indices,
                          float* grad_in) {
  const int64_t count = images * g.channels * g.height * g.width;
  if (count == 0) return 0;
  MaxPoolBackwardKernel<<<Blocks(count), kThreads>>>(g, grad_out, indices, grad_in, count);
  return LastError();
}

int LaunchBatchNormPlaneSums(int64_t planes, int64_t c, int64_t s, const float* x, const float* mean, double* out) {
  if (planes == 0) return 0;
  BatchNormPlaneSumsKernel<<<Blocks(planes), kThreads>>>(planes, c, s, x, mean, out);
  return LastError();
}

int LaunchBatchNormPlaneGradSums(int64_t planes, int64_t c, int64_t s, const float* x, const float* dy,
                                 const float* mean, double* sum, double* dot) {
  if (planes == 0) return 0;
  BatchNormPlaneGradSumsKernel<<<Blocks(planes), kThreads>>>(planes, c, s, x, dy, mean, sum, dot);
  return LastError();
}

int LaunchBatchNormTransform(int64_t count, int64_t c, int64_t s, const float* x, const float* alpha, const float* beta,
                             float* y) {
  if (count == 0) return 0;
  BatchNormTransformKernel<<<Blocks(count), kThreads>>>(count, c, s, x, alpha, beta, y);
  return LastError();
}

int LaunchBatchNormInputGrad(int64_t count, int64_t c, int64_t s, const float* x, const float* dy, const float* mean,
                             const float* invstd, const float* w, const double* k, const double* grad_mean, float* dx) {
  if (count == 0) return 0;
  BatchNormInputGradKernel<<<Blocks(count), kThreads>>>(count, c, s, x, dy, mean, invstd, w, k, grad_mean, dx);
  return LastError();
}

}  // namespace nn_cuda_internal
}  // namespace lockstep
