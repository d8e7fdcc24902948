// The arithmetic of BatchNorm (nn/batch_norm.h) shared by the CPU loops and
// the CUDA kernels, so that both devices give the same bits: the per-plane
// sums in the same order and the per-element transforms with the same
// roundings (the CUDA side is compiled with --fmad=false).
//
// Terms: an [N, C, S...] input is N x C planes of S values; a plane's sums
// are accumulated in double in kLanes independent lanes (a single
// accumulator is one dependent add per value; lanes let the compiler
// vectorize), then the lanes in order, then the tail. A channel's sum is
// its planes' sums added in image order (nn/batch_norm.cc does that on the
// host for both devices).
#ifndef LOCKSTEP_NN_KERNELS_BATCH_NORM_ELEMENTWISE_H_
#define LOCKSTEP_NN_KERNELS_BATCH_NORM_ELEMENTWISE_H_

#include <cstdint>

#include "core/half.h"

namespace lockstep {
namespace batch_norm_elementwise {

constexpr int kLanes = 8;

template <typename Term>
LOCKSTEP_HOST_DEVICE inline double LaneSum(int64_t n, Term term) {
  double acc[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += term(k + j);
  }
  double total = 0.0;
  for (int j = 0; j < kLanes; ++j) total += acc[j];
  for (; k < n; ++k) total += term(k);
  return total;
}

// sum x over one plane.
LOCKSTEP_HOST_DEVICE inline double PlaneSum(const float* plane, int64_t s) {
  return LaneSum(s, [plane](int64_t k) { return static_cast<double>(plane[k]); });
}

// sum (x - m)^2 over one plane, the deviation squared in f32 first (as
// PyTorch's CPU kernel: the mean rounded to f32, then f32 deviations).
LOCKSTEP_HOST_DEVICE inline double PlaneSquaredDeviations(const float* plane, int64_t s, float m) {
  return LaneSum(s, [plane, m](int64_t k) {
    const float d = plane[k] - m;
    return static_cast<double>(d * d);
  });
}

// sum (x - m) dy over one plane.
LOCKSTEP_HOST_DEVICE inline double PlaneDot(const float* x, const float* dy, int64_t s, float m) {
  return LaneSum(s, [x, dy, m](int64_t k) { return static_cast<double>(x[k] - m) * dy[k]; });
}

// dx with batch statistics:
//   (dy - mean(dy) - (x - mean) sum((x - mean) dy) invstd^2 / n) invstd w.
// k = sum((x - mean) dy) invstd^2 / n and grad_mean = sum(dy) / n, per
// channel; the product in double, invstd and w applied in that order.
LOCKSTEP_HOST_DEVICE inline float InputGradBatch(float x, float dy, float mean, double k, double grad_mean,
                                                 float invstd, float w) {
  const double centered = static_cast<double>(x - mean) * k;
  return static_cast<float>((dy - grad_mean - centered) * invstd * w);
}

}  // namespace batch_norm_elementwise
}  // namespace lockstep

#endif  // LOCKSTEP_NN_KERNELS_BATCH_NORM_ELEMENTWISE_H_
