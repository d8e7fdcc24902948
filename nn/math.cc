#include "nn/math.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/internal/elementwise.h"
#include "core/kernels.h"
#include "core/status.h"
#include "nn/kernels/cuda_math.h"
#include "nn/kernels/nn_elementwise.h"
#include "nn/kernels/window_elementwise.h"

namespace lockstep {
namespace {

namespace ew = ::lockstep::elementwise;

bool IsFloating(DType d) { return d == DType::kF32 || d == DType::kF64 || d == DType::kF16 || d == DType::kBF16; }

absl::Status CheckSame(const char* op, const char* name, const Tensor& t, const Tensor& ref) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": `", name, "` is undefined"));
  if (t.dtype() != ref.dtype() || t.device() != ref.device() || t.numel() != ref.numel()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": `", name, "` is ", t.DebugString(), " but must match ",
                                                   ref.DebugString(), " (dtype, device and number of elements)"));
  }
  return absl::OkStatus();
}

absl::Status CheckFloating(const char* op, const Tensor& t) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": undefined tensor"));
  if (!IsFloating(t.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", t.DebugString(), " is not a floating tensor (f32, f64, f16, bf16)"));
  }
  return absl::OkStatus();
}

// Applies the default of one OpenBLAS thread once per process, unless the
// user chose a count (environment or SetCpuMathThreads).
std::once_flag& ThreadDefaultOnce() {
  static std::once_flag once;
  return once;
}

void ApplyDefaultThreads() {
  std::call_once(ThreadDefaultOnce(), [] {
    if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) openblas_set_num_threads(1);
  });
}

template <typename Fn>
void ForFloat(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      fn(float{});
      break;
    case DType::kF64:
      fn(double{});
      break;
    case DType::kF16:
      fn(Half{});
      break;
    case DType::kBF16:
      fn(BFloat16{});
      break;
    default:
      break;
  }
}

// out[i] = ref[i] <= 0 ? 0 : src[i] for f32, branch-free so it vectorizes
// (signs are random: a branch mispredicts half the time). NaN refs pass.
void ThresholdF32(const float* ref, const float* src, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &src[i], sizeof(bits));
    bits &= ref[i] <= 0.0f ? 0u : ~0u;
    std::memcpy(&out[i], &bits, sizeof(bits));
  }
}

// The same on bf16/f16 bits (`inf` the format's +infinity), branch-free on
// integers: ref <= 0 is a zero magnitude, or the sign bit with a magnitude
// up to infinity (a NaN's is above it). No conversion to f32 at all.
void Threshold16(const uint16_t* ref, const uint16_t* src, uint16_t* out, int64_t n, uint16_t inf) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t magnitude = ref[i] & 0x7fff;
    const bool not_positive = magnitude == 0 || ((ref[i] & 0x8000) != 0 && magnitude <= inf);
    out[i] = static_cast<uint16_t>(src[i] & (not_positive ? 0u : 0xffffu));
  }
}

uint16_t InfinityBits(DType dtype) { return dtype == DType::kBF16 ? 0x7f80 : 0x7c00; }

absl::Status CpuGemm(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c, int64_t m, int64_t n,
                     int64_t k, float alpha, float beta) {
  ApplyDefaultThreads();
  const CBLAS_TRANSPOSE op_a = ta ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE op_b = tb ? CblasTrans : CblasNoTrans;
  const int lda = static_cast<int>(ta ? m : k);
  const int ldb = static_cast<int>(tb ? k : n);
  const int ldc = static_cast<int>(n);
  if (c.dtype() == DType::kF32) {
    cblas_sgemm(CblasRowMajor, op_a, op_b, m, n, k, alpha, a.data<float>(), lda, b.data<float>(), ldb, beta,
                c.data<float>(), ldc);
    return absl::OkStatus();
  }
  if (c.dtype() == DType::kF64) {
    cblas_dgemm(CblasRowMajor, op_a, op_b, m, n, k, alpha, a.data<double>(), lda, b.data<double>(), ldb, beta,
                c.data<double>(), ldc);
    return absl::OkStatus();
  }
  // f16/bf16: widen (exact), multiply in f32, round once.
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor a32, Tensor::Empty(a.shape(), DType::kF32));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor b32, Tensor::Empty(b.shape(), DType::kF32));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor c32, Tensor::Empty(c.shape(), DType::kF32));
  LOCKSTEP_RETURN_IF_ERROR(Cast(a, a32));
  LOCKSTEP_RETURN_IF_ERROR(Cast(b, b32));
  if (beta != 0.0f) LOCKSTEP_RETURN_IF_ERROR(Cast(c, c32));
  cblas_sgemm(CblasRowMajor, op_a, op_b, m, n, k, alpha, a32.data<float>(), lda, b32.data<float>(), ldb, beta,
              c32.data<float>(), ldc);
  return Cast(c32, c);
}

}  // namespace

absl::Status SetCpuMathThreads(int threads) {
  if (threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("SetCpuMathThreads: threads must be >= 1, got ", threads));
  }
  std::call_once(ThreadDefaultOnce(), [] {});
  openblas_set_num_threads(threads);
  return absl::OkStatus();
}

absl::Status Gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, float alpha,
                  float beta) {
  LOCKSTEP_RETURN_IF_ERROR(CheckFloating("Gemm", c));
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"a", &a}, {"b", &b}}) {
    if (!t->defined() || t->dtype() != c.dtype() || t->device() != c.device() || t->dim() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("Gemm: operand `", name, "` is ", t->defined() ? t->DebugString() : "undefined",
                       "; expected a 2-D tensor of the output's dtype and device (output ", c.DebugString(), ")"));
    }
  }
  if (c.dim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm: the output must be 2-D, got ", c.DebugString()));
  }
  const int64_t m = trans_a ? a.shape()[1] : a.shape()[0];
  const int64_t k = trans_a ? a.shape()[0] : a.shape()[1];
  const int64_t kb = trans_b ? b.shape()[1] : b.shape()[0];
  const int64_t n = trans_b ? b.shape()[0] : b.shape()[1];
  if (k != kb || c.shape()[0] != m || c.shape()[1] != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm: shapes do not multiply: op(a) is [", m, ", ", k, "], op(b) is [", kb, ", ", n,
                     "], output is ", ShapeToString(c.shape()), "; expected op(a) [m, k] x op(b) [k, n] -> [m, n]"));
  }
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm: dimensions ", m, "x", n, "x", k, " exceed the BLAS int range"));
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  if (c.device().is_cuda()) {
    return nn_cuda::Gemm(c.device().index(), c.dtype(), trans_a, trans_b, m, n, k, alpha, a.raw_data(), b.raw_data(),
                         beta, c.raw_data());
  }
  return CpuGemm(a, trans_a, b, trans_b, c, m, n, k, alpha, beta);
}

absl::StatusOr<Tensor> CastTo(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(t.shape(), dtype, t.device()));
  LOCKSTEP_RETURN_IF_ERROR(Cast(t, out));
  return out;
}

absl::Status Relu(const Tensor& in, const Tensor& out) {
  LOCKSTEP_RETURN_IF_ERROR(CheckFloating("Relu", in));
  LOCKSTEP_RETURN_IF_ERROR(CheckSame("Relu", "out", out, in));
  if (in.device().is_cuda()) {
    return nn_cuda::Relu(in.device().index(), in.dtype(), in.raw_data(), out.raw_data(), in.numel());
  }
  if (in.dtype() == DType::kF32) {
    ThresholdF32(in.data<float>(), in.data<float>(), out.data<float>(), in.numel());
    return absl::OkStatus();
  }
  if (in.dtype() == DType::kBF16 || in.dtype() == DType::kF16) {
    const auto* x = static_cast<const uint16_t*>(in.raw_data());
    Threshold16(x, x, static_cast<uint16_t*>(out.raw_data()), in.numel(), InfinityBits(in.dtype()));
    return absl::OkStatus();
  }
  ForFloat(in.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* x = in.data<T>();
    T* y = out.data<T>();
    for (int64_t i = 0; i < in.numel(); ++i) {
      const auto v = ew::Load(x[i]);
      y[i] = v > 0 || v != v ? x[i] : ew::Store<T>(0);
    }
  });
  return absl::OkStatus();
}

absl::Status ReluBackward(const Tensor& grad_out, const Tensor& out, const Tensor& grad_in) {
  LOCKSTEP_RETURN_IF_ERROR(CheckFloating("ReluBackward", out));
  LOCKSTEP_RETURN_IF_ERROR(CheckSame("ReluBackward", "grad_out", grad_out, out));
  LOCKSTEP_RETURN_IF_ERROR(CheckSame("ReluBackward", "grad_in", grad_in, out));
  if (out.device().is_cuda()) {
    return nn_cuda::ReluBackward(out.device().index(), out.dtype(), grad_out.raw_data(), out.raw_data(),
                                 grad_in.raw_data(), out.numel());
  }
  if (out.dtype() == DType::kF32) {
    ThresholdF32(out.data<float>(), grad_out.data<float>(), grad_in.data<float>(), out.numel());
    return absl::OkStatus();
  }
  if (out.dtype() == DType::kBF16 || out.dtype() == DType::kF16) {
    Threshold16(static_cast<const uint16_t*>(out.raw_data()), static_cast<const uint16_t*>(grad_out.raw_data()),
                static_cast<uint16_t*>(grad_in.raw_data()), out.numel(), InfinityBits(out.dtype()));
    return absl::OkStatus();
  }
  ForFloat(out.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* g = grad_out.data<T>();
    const T* y = out.data<T>();
    T* gi = grad_in.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) gi[i] = ew::Load(y[i]) <= 0 ? ew::Store<T>(0) : g[i];
  });
  return absl::OkStatus();
}

absl::Status DropoutApply(const Tensor& in, const Tensor& out, double keep_probability, uint64_t seed,
                          uint64_t offset) {
  LOCKSTEP_RETURN_IF_ERROR(CheckFloating("Dropout", in));
  LOCKSTEP_RETURN_IF_ERROR(CheckSame("Dropout", "out", out, in));
  if (!(keep_probability > 0.0 && keep_probability <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Dropout: keep probability must be in (0, 1], got ", keep_probability));
  }
  const uint32_t threshold = static_cast<uint32_t>(std::min(std::ldexp(keep_probability, 24), 16777216.0));
  const float scale = static_cast<float>(1.0 / keep_probability);
  if (in.device().is_cuda()) {
    return nn_cuda::Dropout(in.device().index(), in.dtype(), in.raw_data(), out.raw_data(), in.numel(), seed, offset,
                            threshold, scale);
  }
  ForFloat(in.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* x = in.data<T>();
    T* y = out.data<T>();
    for (int64_t i = 0; i < in.numel(); ++i) {
      const bool keep = nn_elementwise::DropoutKeep(seed, offset, static_cast<uint64_t>(i), threshold);
      y[i] = ew::Store<T>(keep ? ew::Load(x[i]) * static_cast<ew::Acc<T>>(scale) : 0);
    }
  });
  return absl::OkStatus();
}

absl::StatusOr<Shape> WindowOutputSize(int64_t height, int64_t width, const Window2d& w) {
  if (w.kernel_h < 1 || w.kernel_w < 1 || w.stride_h < 1 || w.stride_w < 1 || w.pad_h < 0 || w.pad_w < 0 ||
      height < 0 || width < 0) {
    return absl::InvalidArgumentError(absl::StrCat("window: need kernel >= 1, stride >= 1, padding >= 0; got kernel ",
                                                   w.kernel_h, "x", w.kernel_w, ", stride ", w.stride_h, "x",
                                                   w.stride_w, ", padding ", w.pad_h, "x", w.pad_w));
  }
  const int64_t out_h = (height + 2 * w.pad_h - w.kernel_h) / w.stride_h + 1;
  const int64_t out_w = (width + 2 * w.pad_w - w.kernel_w) / w.stride_w + 1;
  if (height + 2 * w.pad_h < w.kernel_h || width + 2 * w.pad_w < w.kernel_w || out_h < 1 || out_w < 1) {
    return absl::InvalidArgumentError(absl::StrCat("window: a ", w.kernel_h, "x", w.kernel_w, " kernel does not fit a ",
                                                   height, "x", width, " input padded by ", w.pad_h, "x", w.pad_w,
                                                   " (output size too small)"));
  }
  return Shape{out_h, out_w};
}

namespace {

absl::StatusOr<window_elementwise::Geometry> GeometryOf(int64_t c, int64_t h, int64_t w, const Window2d& window) {
  LOCKSTEP_ASSIGN_OR_RETURN(Shape out, WindowOutputSize(h, w, window));
  return window_elementwise::Geometry{
      c,      h,     w, window.kernel_h, window.kernel_w, window.stride_h, window.stride_w, window.pad_h, window.pad_w,
      out[0], out[1]};
}

absl::Status CheckF32(const char* op, const char* name, const Tensor& t, const Shape& shape, Device device,
                      DType dtype = DType::kF32) {
  if (!t.defined() || t.dtype() != dtype || t.shape() != shape || t.device() != device) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": `", name, "` must be ", DTypeName(dtype),
                                                   ShapeToString(shape), " on ", device.ToString(), ", got ",
                                                   t.defined() ? t.DebugString() : "undefined"));
  }
  return absl::OkStatus();
}

// An image [C, H, W] (Im2Col/Col2Im) or a batch [N, C, H, W] (pooling).
absl::Status CheckImage(const char* op, const Tensor& t, int64_t dims) {
  if (!t.defined() || t.dtype() != DType::kF32 || t.dim() != dims) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": expected an f32 tensor with ", dims, " dimensions, got ",
                                                   t.defined() ? t.DebugString() : "undefined"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Im2Col(const Tensor& image, const Window2d& window, const Tensor& columns) {
  LOCKSTEP_RETURN_IF_ERROR(CheckImage("Im2Col", image, 3));
  const Shape& s = image.shape();
  LOCKSTEP_ASSIGN_OR_RETURN(window_elementwise::Geometry g, GeometryOf(s[0], s[1], s[2], window));
  LOCKSTEP_RETURN_IF_ERROR(CheckF32("Im2Col", "columns", columns,
                                    {g.channels * g.kernel_h * g.kernel_w, g.out_h * g.out_w}, image.device()));
  if (image.device().is_cuda()) {
    return nn_cuda::Im2Col(image.device().index(), g, image.data<float>(), columns.data<float>());
  }
  const float* x = image.data<float>();
  float* col = columns.data<float>();
  for (int64_t i = 0; i < columns.numel(); ++i) col[i] = window_elementwise::Im2ColAt(g, x, i);
  return absl::OkStatus();
}

absl::Status Col2Im(const Tensor& columns, const Window2d& window, const Tensor& image) {
  LOCKSTEP_RETURN_IF_ERROR(CheckImage("Col2Im", image, 3));
  const Shape& s = image.shape();
  LOCKSTEP_ASSIGN_OR_RETURN(window_elementwise::Geometry g, GeometryOf(s[0], s[1], s[2], window));
  LOCKSTEP_RETURN_IF_ERROR(CheckF32("Col2Im", "columns", columns,
                                    {g.channels * g.kernel_h * g.kernel_w, g.out_h * g.out_w}, image.device()));
  if (image.device().is_cuda()) {
    return nn_cuda::Col2Im(image.device().index(), g, columns.data<float>(), image.data<float>());
  }
  const float* col = columns.data<float>();
  float* x = image.data<float>();
  for (int64_t i = 0; i < image.numel(); ++i) x[i] = window_elementwise::Col2ImAt(g, col, i);
  return absl::OkStatus();
}

absl::Status MaxPool2dForward(const Tensor& in, const Window2d& window, const Tensor& out, const Tensor& indices) {
  LOCKSTEP_RETURN_IF_ERROR(CheckImage("MaxPool2d", in, 4));
  const Shape& s = in.shape();
  if (window.pad_h * 2 > window.kernel_h || window.pad_w * 2 > window.kernel_w) {
    return absl::InvalidArgumentError(
        absl::StrCat("MaxPool2d: padding should be at most half of the kernel size, got padding ", window.pad_h, "x",
                     window.pad_w, " for a ", window.kernel_h, "x", window.kernel_w, " kernel"));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(window_elementwise::Geometry g, GeometryOf(s[1], s[2], s[3], window));
  const Shape out_shape = {s[0], s[1], g.out_h, g.out_w};
  LOCKSTEP_RETURN_IF_ERROR(CheckF32("MaxPool2d", "out", out, out_shape, in.device()));
  LOCKSTEP_RETURN_IF_ERROR(CheckF32("MaxPool2d", "indices", indices, out_shape, in.device(), DType::kI32));
  if (in.device().is_cuda()) {
    return nn_cuda::MaxPool(in.device().index(), g, s[0], in.data<float>(), out.data<float>(), indices.data<int32_t>());
  }
  // Plane by plane with the window clipped once per position (the CUDA
  // kernel's MaxPoolAt per element spends most of its time on / and %);
  // the same comparisons in the same order, so the same winners.
  const int64_t planes = s[0] * g.channels, in_plane = g.height * g.width, out_plane = g.out_h * g.out_w;
  for (int64_t p = 0; p < planes; ++p) {
    const float* x = in.data<float>() + p * in_plane;
    float* y = out.data<float>() + p * out_plane;
    int32_t* idx = indices.data<int32_t>() + p * out_plane;
    if (g.pad_h == 0 && g.pad_w == 0) {
      // Every window lies inside the plane: a row of windows at a time, one
      // kernel offset after another in MaxPoolAt's order, with no bounds
      // and no data-dependent branch in the inner loop.
      for (int64_t oh = 0; oh < g.out_h; ++oh) {
        float* best = y + oh * g.out_w;
        int32_t* best_index = idx + oh * g.out_w;
        const int64_t top = oh * g.stride_h * g.width;
        for (int64_t ow = 0; ow < g.out_w; ++ow) {
          best[ow] = x[top + ow * g.stride_w];
          best_index[ow] = static_cast<int32_t>(top + ow * g.stride_w);
        }
        for (int64_t ki = 0; ki < g.kernel_h; ++ki) {
          for (int64_t kj = ki == 0 ? 1 : 0; kj < g.kernel_w; ++kj) {
            const int64_t offset = top + ki * g.width + kj;
            for (int64_t ow = 0; ow < g.out_w; ++ow) {
              const int32_t at = static_cast<int32_t>(offset + ow * g.stride_w);
              const float v = x[at], b = best[ow];
              // A mask, not a branch (GCC turns ?: back into jumps here).
              const uint32_t take = 0u - static_cast<uint32_t>((v > b) | (v != v));
              uint32_t vb, bb;
              std::memcpy(&vb, &v, sizeof vb);
              std::memcpy(&bb, &b, sizeof bb);
              const uint32_t out = (vb & take) | (bb & ~take);
              std::memcpy(&best[ow], &out, sizeof out);
              best_index[ow] = static_cast<int32_t>((static_cast<uint32_t>(at) & take) |
                                                    (static_cast<uint32_t>(best_index[ow]) & ~take));
            }
          }
        }
      }
      continue;
    }
    for (int64_t oh = 0; oh < g.out_h; ++oh) {
      const int64_t h0 = std::max<int64_t>(oh * g.stride_h - g.pad_h, 0);
      const int64_t h1 = std::min<int64_t>(oh * g.stride_h - g.pad_h + g.kernel_h, g.height);
      for (int64_t ow = 0; ow < g.out_w; ++ow) {
        const int64_t w0 = std::max<int64_t>(ow * g.stride_w - g.pad_w, 0);
        const int64_t w1 = std::min<int64_t>(ow * g.stride_w - g.pad_w + g.kernel_w, g.width);
        // The window's first element starts (padding <= kernel / 2, so
        // every window holds one), then MaxPoolAt's rule.
        float best = x[h0 * g.width + w0];
        int64_t best_index = h0 * g.width + w0;
        for (int64_t ih = h0; ih < h1; ++ih) {
          for (int64_t iw = ih == h0 ? w0 + 1 : w0; iw < w1; ++iw) {
            // Selects, not a branch: on real activations the comparison
            // is a coin flip, and mispredictions would be most of the time.
            const float v = x[ih * g.width + iw];
            const bool take = (v > best) | (v != v);
            best = take ? v : best;
            best_index = take ? ih * g.width + iw : best_index;
          }
        }
        y[oh * g.out_w + ow] = best;
        idx[oh * g.out_w + ow] = static_cast<int32_t>(best_index);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status MaxPool2dBackward(const Tensor& grad_out, const Tensor& indices, const Window2d& window,
                               const Tensor& grad_in) {
  LOCKSTEP_RETURN_IF_ERROR(CheckImage("MaxPool2d backward", grad_in, 4));
  const Shape& s = grad_in.shape();
  LOCKSTEP_ASSIGN_OR_RETURN(window_elementwise::Geometry g, GeometryOf(s[1], s[2], s[3], window));
  const Shape out_shape = {s[0], s[1], g.out_h, g.out_w};
  LOCKSTEP_RETURN_IF_ERROR(CheckF32("MaxPool2d backward", "grad_out", grad_out, out_shape, grad_in.device()));
  LOCKSTEP_RETURN_IF_ERROR(
      CheckF32("MaxPool2d backward", "indices", indices, out_shape, grad_in.device(), DType::kI32));
  if (grad_in.device().is_cuda()) {
    return nn_cuda::MaxPoolBackward(grad_in.device().index(), g, s[0], grad_out.data<float>(), indices.data<int32_t>(),
                                    grad_in.data<float>());
  }
  // Scattered, as PyTorch's CPU kernel: each window's gradient added to its
  // winner, windows in increasing order. A pixel that wins several windows
  // gets their sum in the order MaxPoolBackwardAt gathers it (from 0.0f, in
  // increasing window order), so both give the same bits.
  const int64_t planes = s[0] * g.channels, in_plane = g.height * g.width, out_plane = g.out_h * g.out_w;
  std::fill_n(grad_in.data<float>(), grad_in.numel(), 0.0f);
  for (int64_t p = 0; p < planes; ++p) {
    const float* gy = grad_out.data<float>() + p * out_plane;
    const int32_t* idx = indices.data<int32_t>() + p * out_plane;
    float* gx = grad_in.data<float>() + p * in_plane;
    for (int64_t o = 0; o < out_plane; ++o) {
      if (idx[o] < 0 || idx[o] >= in_plane) {
        return absl::InvalidArgumentError(absl::StrCat("MaxPool2d backward: index ", idx[o], " of window ", o,
                                                       " of plane ", p, " is outside the ", g.height, "x", g.width,
                                                       " input (indices from another Forward?)"));
      }
      gx[idx[o]] += gy[o];
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep
