// The CPU kernels, compiled once per instruction set. Each
// core/cpu_kernels_<isa>.cc defines LOCKSTEP_CPU_ISA (a namespace name) and
// includes this file with its own compiler flags; core/cpu_kernels.cc picks
// the best one the CPU supports at run time, as PyTorch's CPU_CAPABILITY
// dispatch does. Plain loops over contiguous arrays that gcc vectorizes.
//
// Terms: a "block" is kBlock consecutive elements. Reductions of f16/bf16 run
// block by block through an f32 accumulator on the stack, so that every input
// is added in f32 and the result rounded once, while the inner loops stay
// simple enough to vectorize.
//
// No include guard: included once per ISA translation unit.
#ifndef LOCKSTEP_CPU_ISA
#error "define LOCKSTEP_CPU_ISA before including cpu_kernels_impl.h"
#endif

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "absl/types/span.h"
#include "core/dtype.h"
#include "core/internal/bf16_avx2.h"
#include "core/internal/elementwise.h"
#include "core/internal/half_simd.h"
#include "core/reduce_op.h"

namespace lockstep {
namespace cpu {
namespace LOCKSTEP_CPU_ISA {
namespace {

namespace ew = elementwise;

constexpr int64_t kBlock = 1024;

// 16-bit blocks to and from f32: F16C for f16 and AVX2 for bf16 where
// available (core/internal/half_simd.h).
void LoadBlock(const Half* in, float* out, int64_t n) { half_simd::HalfToFloat(in, out, n); }
void LoadBlock(const BFloat16* in, float* out, int64_t n) { half_simd::BFloat16ToFloat(in, out, n); }
void StoreBlock(const float* in, Half* out, int64_t n) { half_simd::FloatToHalf(in, out, n); }
// Types that are their own accumulator: plain copies.
template <typename T>
void LoadBlock(const T* in, T* out, int64_t n) {
  std::copy(in, in + n, out);
}
template <typename T>
void StoreBlock(const T* in, T* out, int64_t n) {
  std::copy(in, in + n, out);
}
void StoreBlock(const float* in, BFloat16* out, int64_t n) { half_simd::FloatToBFloat16(in, out, n); }

template <typename T, typename Op>
void ReduceTyped(absl::Span<const void* const> inputs, T* out, int64_t count, bool average) {
  using A = ew::Acc<T>;
  const int n = static_cast<int>(inputs.size());
  bool out_is_later_input = false;
  for (int k = 1; k < n; ++k) out_is_later_input |= inputs[k] == out;
  bool direct = false;
  if constexpr (std::is_same_v<A, T>) direct = !out_is_later_input;
  if (direct) {
    if constexpr (std::is_same_v<A, T>) {
      // Accumulate directly in `out` (which may alias inputs[0], not a later
      // input: that one would be overwritten by the first copy).
      const T* first = static_cast<const T*>(inputs[0]);
      if (first != reinterpret_cast<const T*>(out)) std::copy(first, first + count, out);
      for (int k = 1; k < n; ++k) {
        const T* in = static_cast<const T*>(inputs[k]);
        for (int64_t i = 0; i < count; ++i) out[i] = Op::Apply(out[i], in[i]);
      }
      if (average) {
        for (int64_t i = 0; i < count; ++i) out[i] = ew::DivideBy(out[i], n);
      }
    }
  } else {
#if defined(__AVX2__)
    if constexpr (std::is_same_v<T, BFloat16> && std::is_same_v<Op, ew::SumOp>) {
      if (n == 2 && !average) {
        // The hot case (gradient buckets in bf16): one fused pass, 16 at a time.
        const auto* a = static_cast<const BFloat16*>(inputs[0]);
        const auto* b = static_cast<const BFloat16*>(inputs[1]);
        int64_t i = 0;
        for (; i + 16 <= count; i += 16) {
          const __m256i va = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i));
          const __m256i vb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i));
          const __m256 lo =
              _mm256_add_ps(bf16_avx2::Widen(_mm256_castsi256_si128(va)), bf16_avx2::Widen(_mm256_castsi256_si128(vb)));
          const __m256 hi = _mm256_add_ps(bf16_avx2::Widen(_mm256_extracti128_si256(va, 1)),
                                          bf16_avx2::Widen(_mm256_extracti128_si256(vb, 1)));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                              bf16_avx2::Narrow(bf16_avx2::Round(lo), bf16_avx2::Round(hi)));
        }
        for (; i < count; ++i) out[i] = FloatToBFloat16(BFloat16ToFloat(a[i]) + BFloat16ToFloat(b[i]));
        return;
      }
    }
#endif
    alignas(64) A acc[kBlock];
    alignas(64) A next[kBlock];
    for (int64_t begin = 0; begin < count; begin += kBlock) {
      const int64_t len = std::min(kBlock, count - begin);
      LoadBlock(static_cast<const T*>(inputs[0]) + begin, acc, len);
      for (int k = 1; k < n; ++k) {
        LoadBlock(static_cast<const T*>(inputs[k]) + begin, next, len);
        for (int64_t i = 0; i < len; ++i) acc[i] = Op::Apply(acc[i], next[i]);
      }
      if (average) {
        for (int64_t i = 0; i < len; ++i) acc[i] = ew::DivideBy(acc[i], n);
      }
      StoreBlock(acc, out + begin, len);
    }
  }
}

template <typename Fn>
void VisitFloat(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      fn(TypeTag<float>{});
      return;
    case DType::kF64:
      fn(TypeTag<double>{});
      return;
    case DType::kF16:
      fn(TypeTag<Half>{});
      return;
    case DType::kBF16:
      fn(TypeTag<BFloat16>{});
      return;
    default:
      return;
  }
}

}  // namespace

void Reduce(ReduceOp op, DType dtype, absl::Span<const void* const> inputs, void* out, int64_t count) {
  if (count == 0) return;
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dst = static_cast<T*>(out);
    switch (op) {
      case ReduceOp::kSum:
        ReduceTyped<T, ew::SumOp>(inputs, dst, count, false);
        return;
      case ReduceOp::kAvg:
        ReduceTyped<T, ew::SumOp>(inputs, dst, count, true);
        return;
      case ReduceOp::kProd:
        ReduceTyped<T, ew::ProdOp>(inputs, dst, count, false);
        return;
      case ReduceOp::kMin:
        ReduceTyped<T, ew::MinOp>(inputs, dst, count, false);
        return;
      case ReduceOp::kMax:
        ReduceTyped<T, ew::MaxOp>(inputs, dst, count, false);
        return;
      case ReduceOp::kBand:
      case ReduceOp::kBor:
      case ReduceOp::kBxor:
        // Integers only (core/kernels.cc refuses the others).
        if constexpr (std::is_integral_v<T>) {
          if (op == ReduceOp::kBand) ReduceTyped<T, ew::BandOp>(inputs, dst, count, false);
          if (op == ReduceOp::kBor) ReduceTyped<T, ew::BorOp>(inputs, dst, count, false);
          if (op == ReduceOp::kBxor) ReduceTyped<T, ew::BxorOp>(inputs, dst, count, false);
        }
        return;
    }
  });
}

void Scale(DType dtype, void* data, int64_t count, double factor) {
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(data);
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      const float f = static_cast<float>(factor);
      alignas(64) float block[kBlock];
      for (int64_t begin = 0; begin < count; begin += kBlock) {
        const int64_t len = std::min(kBlock, count - begin);
        LoadBlock(p + begin, block, len);
        for (int64_t i = 0; i < len; ++i) block[i] *= f;
        StoreBlock(block, p + begin, len);
      }
    } else {
      for (int64_t i = 0; i < count; ++i) p[i] = ew::ScaleElement(p[i], factor);
    }
  });
}

void Divide(DType dtype, void* data, int64_t count, int divisor) {
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(data);
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      alignas(64) float block[kBlock];
      for (int64_t begin = 0; begin < count; begin += kBlock) {
        const int64_t len = std::min(kBlock, count - begin);
        LoadBlock(p + begin, block, len);
        for (int64_t i = 0; i < len; ++i) block[i] = ew::DivideBy(block[i], divisor);
        StoreBlock(block, p + begin, len);
      }
    } else {
      for (int64_t i = 0; i < count; ++i) p[i] = ew::DivideBy(p[i], divisor);
    }
  });
}

void Cast(DType from, const void* src, DType to, void* dst, int64_t count) {
  VisitFloat(from, [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    VisitFloat(to, [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      const From* s = static_cast<const From*>(src);
      To* d = static_cast<To*>(dst);
      if constexpr (std::is_same_v<From, float> && !std::is_same_v<To, double> && !std::is_same_v<To, float>) {
        StoreBlock(s, d, count);
      } else if constexpr (std::is_same_v<To, float> && !std::is_same_v<From, double> && !std::is_same_v<From, float>) {
        LoadBlock(s, d, count);
      } else {
        for (int64_t i = 0; i < count; ++i) d[i] = ew::CastElement<To>(s[i]);
      }
    });
  });
}

bool AllFinite(DType dtype, const void* data, int64_t count) {
  return VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>) {
      return true;
    } else {
      const T* p = static_cast<const T*>(data);
      // Branch-free accumulation per block so the scan vectorizes; stop early
      // at the first block with a non-finite value.
      for (int64_t begin = 0; begin < count; begin += kBlock) {
        const int64_t end = std::min(count, begin + kBlock);
        bool finite = true;
        for (int64_t i = begin; i < end; ++i) finite &= ew::IsFinite(p[i]);
        if (!finite) return false;
      }
      return true;
    }
  });
}

}  // namespace LOCKSTEP_CPU_ISA
}  // namespace cpu
}  // namespace lockstep
