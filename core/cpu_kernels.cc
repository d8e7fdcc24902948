// CPU kernels: plain loops over contiguous arrays that gcc vectorizes at -O3.
//
// Terms: a "block" is kBlock consecutive elements. Reductions of f16/bf16 run
// block by block through an f32 accumulator on the stack, so that every input
// is added in f32 and the result rounded once, while the inner loops stay
// simple enough to vectorize.
#include "core/cpu_kernels.h"

#include <algorithm>
#include <type_traits>

#include "core/internal/elementwise.h"

namespace lockstep {
namespace cpu {
namespace {

namespace ew = elementwise;

constexpr int64_t kBlock = 1024;

template <typename T, typename Op>
void ReduceTyped(absl::Span<const void* const> inputs, T* out, int64_t count, bool average) {
  using A = ew::Acc<T>;
  const int n = static_cast<int>(inputs.size());
  if constexpr (std::is_same_v<A, T>) {
    // Accumulate directly in `out` (which may alias inputs[0]).
    const T* first = static_cast<const T*>(inputs[0]);
    if (first != out) std::copy(first, first + count, out);
    for (int k = 1; k < n; ++k) {
      const T* in = static_cast<const T*>(inputs[k]);
      for (int64_t i = 0; i < count; ++i) out[i] = Op::Apply(out[i], in[i]);
    }
    if (average) {
      for (int64_t i = 0; i < count; ++i) out[i] = ew::DivideBy(out[i], n);
    }
  } else {
    A acc[kBlock];
    for (int64_t begin = 0; begin < count; begin += kBlock) {
      const int64_t len = std::min(kBlock, count - begin);
      const T* first = static_cast<const T*>(inputs[0]) + begin;
      for (int64_t i = 0; i < len; ++i) acc[i] = ew::Load(first[i]);
      for (int k = 1; k < n; ++k) {
        const T* in = static_cast<const T*>(inputs[k]) + begin;
        for (int64_t i = 0; i < len; ++i) acc[i] = Op::Apply(acc[i], A(ew::Load(in[i])));
      }
      if (average) {
        for (int64_t i = 0; i < len; ++i) acc[i] = ew::DivideBy(acc[i], n);
      }
      T* dst = out + begin;
      for (int64_t i = 0; i < len; ++i) dst[i] = ew::Store<T>(acc[i]);
    }
  }
}

template <typename Fn>
void VisitFloat(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: fn(TypeTag<float>{}); return;
    case DType::kF64: fn(TypeTag<double>{}); return;
    case DType::kF16: fn(TypeTag<Half>{}); return;
    case DType::kBF16: fn(TypeTag<BFloat16>{}); return;
    default: return;
  }
}

}  // namespace

void Reduce(ReduceOp op, DType dtype, absl::Span<const void* const> inputs, void* out,
            int64_t count) {
  if (count == 0) return;
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dst = static_cast<T*>(out);
    switch (op) {
      case ReduceOp::kSum: ReduceTyped<T, ew::SumOp>(inputs, dst, count, false); return;
      case ReduceOp::kAvg: ReduceTyped<T, ew::SumOp>(inputs, dst, count, true); return;
      case ReduceOp::kProd: ReduceTyped<T, ew::ProdOp>(inputs, dst, count, false); return;
      case ReduceOp::kMin: ReduceTyped<T, ew::MinOp>(inputs, dst, count, false); return;
      case ReduceOp::kMax: ReduceTyped<T, ew::MaxOp>(inputs, dst, count, false); return;
    }
  });
}

void Scale(DType dtype, void* data, int64_t count, double factor) {
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(data);
    for (int64_t i = 0; i < count; ++i) p[i] = ew::ScaleElement(p[i], factor);
  });
}

void Cast(DType from, const void* src, DType to, void* dst, int64_t count) {
  VisitFloat(from, [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    VisitFloat(to, [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      const From* s = static_cast<const From*>(src);
      To* d = static_cast<To*>(dst);
      for (int64_t i = 0; i < count; ++i) d[i] = ew::CastElement<To>(s[i]);
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

}  // namespace cpu
}  // namespace lockstep
