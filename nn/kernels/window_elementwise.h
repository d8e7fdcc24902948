// Per-element index arithmetic of im2col/col2im (Conv2d) and max pooling,
// shared by the CPU loops and the CUDA kernels. Every output element is
// computed by gathering (no scattered adds), so results are deterministic
// and identical on both devices.
//
// Terms: an image is [channels, height, width]; a window is kernel_h x
// kernel_w, moved by stride over the image padded with pad on each side;
// out_h x out_w is the number of window positions. The column matrix of
// im2col is [channels * kernel_h * kernel_w, out_h * out_w].
#ifndef LOCKSTEP_NN_KERNELS_WINDOW_ELEMENTWISE_H_
#define LOCKSTEP_NN_KERNELS_WINDOW_ELEMENTWISE_H_

#include <cstdint>

#include "core/half.h"

namespace lockstep {
namespace window_elementwise {

struct Geometry {
  int64_t channels, height, width;
  int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
  int64_t out_h, out_w;
};

// Element i of the column matrix.
LOCKSTEP_HOST_DEVICE inline float Im2ColAt(const Geometry& g, const float* image, int64_t i) {
  const int64_t positions = g.out_h * g.out_w;
  const int64_t row = i / positions, col = i % positions;
  const int64_t c = row / (g.kernel_h * g.kernel_w);
  const int64_t ki = (row / g.kernel_w) % g.kernel_h, kj = row % g.kernel_w;
  const int64_t ih = (col / g.out_w) * g.stride_h - g.pad_h + ki;
  const int64_t iw = (col % g.out_w) * g.stride_w - g.pad_w + kj;
  if (ih < 0 || ih >= g.height || iw < 0 || iw >= g.width) return 0.0f;
  return image[(c * g.height + ih) * g.width + iw];
}

// Calls fn(ki, kj, window) for every window position (window = oh * out_w +
// ow) whose kernel offset (ki, kj) lands on pixel (ih, iw), in increasing
// window order: the windows that read that pixel.
template <typename Fn>
LOCKSTEP_HOST_DEVICE inline void ForEachWindowOf(const Geometry& g, int64_t ih, int64_t iw, Fn&& fn) {
  for (int64_t ki = g.kernel_h - 1; ki >= 0; --ki) {  // increasing window rows
    const int64_t th = ih + g.pad_h - ki;
    if (th < 0 || th % g.stride_h != 0 || th / g.stride_h >= g.out_h) continue;
    for (int64_t kj = g.kernel_w - 1; kj >= 0; --kj) {
      const int64_t tw = iw + g.pad_w - kj;
      if (tw < 0 || tw % g.stride_w != 0 || tw / g.stride_w >= g.out_w) continue;
      fn(ki, kj, (th / g.stride_h) * g.out_w + tw / g.stride_w);
    }
  }
}

// Image element i of col2im: the sum of every column entry that im2col took
// from it, in increasing window order.
LOCKSTEP_HOST_DEVICE inline float Col2ImAt(const Geometry& g, const float* columns, int64_t i) {
  const int64_t c = i / (g.height * g.width);
  const int64_t positions = g.out_h * g.out_w;
  float sum = 0.0f;
  ForEachWindowOf(g, (i / g.width) % g.height, i % g.width, [&](int64_t ki, int64_t kj, int64_t window) {
    sum += columns[((c * g.kernel_h + ki) * g.kernel_w + kj) * positions + window];
  });
  return sum;
}

// Max over window `o` (flat over channels, out_h, out_w) of one image, as
// PyTorch's CPU max_pool2d: the first maximum wins; a NaN is taken whenever
// met (so the last NaN wins).
// `*index` is the flat ih * width + iw of the winner within the channel.
LOCKSTEP_HOST_DEVICE inline float MaxPoolAt(const Geometry& g, const float* image, int64_t o, int32_t* index) {
  const int64_t c = o / (g.out_h * g.out_w);
  const int64_t oh = (o / g.out_w) % g.out_h, ow = o % g.out_w;
  const float* plane = image + c * g.height * g.width;
  float best = 0.0f;
  int64_t best_index = -1;
  for (int64_t ki = 0; ki < g.kernel_h; ++ki) {
    const int64_t ih = oh * g.stride_h - g.pad_h + ki;
    if (ih < 0 || ih >= g.height) continue;
    for (int64_t kj = 0; kj < g.kernel_w; ++kj) {
      const int64_t iw = ow * g.stride_w - g.pad_w + kj;
      if (iw < 0 || iw >= g.width) continue;
      const float v = plane[ih * g.width + iw];
      if (best_index < 0 || v > best || v != v) {
        best = v;
        best_index = ih * g.width + iw;
      }
    }
  }
  *index = static_cast<int32_t>(best_index);
  return best;
}

// Image element i of max pooling's backward: the sum of the gradients of
// every window whose winner it was.
LOCKSTEP_HOST_DEVICE inline float MaxPoolBackwardAt(const Geometry& g, const float* grad_out, const int32_t* indices,
                                                    int64_t i) {
  const int64_t c = i / (g.height * g.width);
  const int64_t ih = (i / g.width) % g.height, iw = i % g.width;
  const int64_t plane_index = ih * g.width + iw;
  const int64_t base = c * g.out_h * g.out_w;
  float sum = 0.0f;
  ForEachWindowOf(g, ih, iw, [&](int64_t, int64_t, int64_t window) {
    if (indices[base + window] == plane_index) sum += grad_out[base + window];
  });
  return sum;
}

}  // namespace window_elementwise
}  // namespace lockstep

#endif  // LOCKSTEP_NN_KERNELS_WINDOW_ELEMENTWISE_H_
