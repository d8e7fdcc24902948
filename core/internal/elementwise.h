// Per-element arithmetic shared by the CPU and CUDA kernels, so that both
// produce bit-identical results.
//
// Terms: an element type T is loaded into its accumulator type Acc<T> (f32
// for f16/bf16/f32, f64 for f64, T itself for integers), combined there, and
// stored back once. Integer SUM and PROD wrap modulo 2^bits, as in PyTorch.
// bool is logic: SUM and MAX are or, PROD and MIN are and (as gloo's sum
// and product on bool). BAND, BOR and BXOR apply to integers and bool only
// (floating types never reach them: the kernels' callers refuse them).
// MIN and MAX propagate NaN; between equal values (-0 and +0) they return the
// later input. AVG divides the accumulated sum by the number of
// inputs (integers truncate toward zero).
#ifndef LOCKSTEP_CORE_INTERNAL_ELEMENTWISE_H_
#define LOCKSTEP_CORE_INTERNAL_ELEMENTWISE_H_

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/half.h"

namespace lockstep {
namespace elementwise {

template <typename T>
struct AccOf {
  using type = T;
};
template <>
struct AccOf<Half> {
  using type = float;
};
template <>
struct AccOf<BFloat16> {
  using type = float;
};
template <typename T>
using Acc = typename AccOf<T>::type;

LOCKSTEP_HOST_DEVICE inline float Load(Half v) { return HalfToFloat(v); }
LOCKSTEP_HOST_DEVICE inline float Load(BFloat16 v) { return BFloat16ToFloat(v); }
template <typename T>
LOCKSTEP_HOST_DEVICE inline T Load(T v) {
  return v;
}

template <typename T>
LOCKSTEP_HOST_DEVICE inline T Store(Acc<T> v) {
  if constexpr (std::is_same_v<T, Half>) {
    return FloatToHalf(v);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return FloatToBFloat16(v);
  } else {
    return v;
  }
}

// Integer arithmetic through the unsigned type of the same width: wraps
// instead of signed overflow (undefined behaviour).
template <typename T>
LOCKSTEP_HOST_DEVICE inline T WrapAdd(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}

template <typename T>
LOCKSTEP_HOST_DEVICE inline T WrapMul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  // uint8_t promotes to int: multiply as unsigned int so 255*255 stays defined.
  using Wide = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
  return static_cast<T>(static_cast<U>(static_cast<Wide>(static_cast<U>(a)) * static_cast<Wide>(static_cast<U>(b))));
}

struct SumOp {
  template <typename A>
  LOCKSTEP_HOST_DEVICE static A Apply(A a, A b) {
    if constexpr (std::is_same_v<A, bool>) {
      return a || b;
    } else if constexpr (std::is_integral_v<A>) {
      return WrapAdd(a, b);
    } else {
      return a + b;
    }
  }
};

struct ProdOp {
  template <typename A>
  LOCKSTEP_HOST_DEVICE static A Apply(A a, A b) {
    if constexpr (std::is_same_v<A, bool>) {
      return a && b;
    } else if constexpr (std::is_integral_v<A>) {
      return WrapMul(a, b);
    } else {
      return a * b;
    }
  }
};

struct MinOp {
  // `a != a` is true only for NaN; one select keeps the loop vectorizable.
  template <typename A>
  LOCKSTEP_HOST_DEVICE static A Apply(A a, A b) {
    return (a < b || a != a) ? a : b;
  }
};

struct MaxOp {
  template <typename A>
  LOCKSTEP_HOST_DEVICE static A Apply(A a, A b) {
    return (a > b || a != a) ? a : b;
  }
};

// Bitwise reductions; floating types pass through unchanged (never used:
// see above).
struct BandOp {
  template <typename A>
  LOCKSTEP_HOST_DEVICE static A Apply(A a, A b) {
    if constexpr (std::is_integral_v<A>) {
      return static_cast<A>(a & b);
    } else {
      return a;
    }
  }
};

struct BorOp {
  template <typename A>
  LOCKSTEP_HOST_DEVICE static A Apply(A a, A b) {
    if constexpr (std::is_integral_v<A>) {
      return static_cast<A>(a | b);
    } else {
      return a;
    }
  }
};

struct BxorOp {
  template <typename A>
  LOCKSTEP_HOST_DEVICE static A Apply(A a, A b) {
    if constexpr (std::is_integral_v<A>) {
      return static_cast<A>(a ^ b);
    } else {
      return a;
    }
  }
};

// AVG's final step on an accumulated sum of `n` inputs. Types narrower than
// int divide as int (an int8 cannot hold a world size above 127); integers
// truncate toward zero.
template <typename A>
LOCKSTEP_HOST_DEVICE inline A DivideBy(A sum, int n) {
  if constexpr (std::is_integral_v<A> && sizeof(A) < sizeof(int)) {
    return static_cast<A>(static_cast<int>(sum) / n);
  } else {
    return sum / static_cast<A>(n);
  }
}
template <>
LOCKSTEP_HOST_DEVICE inline uint8_t DivideBy(uint8_t sum, int n) {
  return static_cast<uint8_t>(sum / static_cast<unsigned>(n));
}

// Scale for integers: truncate toward zero and saturate; NaN factors are
// rejected before any kernel runs.
template <typename T>
LOCKSTEP_HOST_DEVICE inline T ScaleInteger(T v, double factor) {
  const double scaled = static_cast<double>(v) * factor;
  // Bounds as doubles: max() of int64 rounds up to 2^63, so compare with >=.
  const double lo = static_cast<double>(std::numeric_limits<T>::min());
  const double hi = static_cast<double>(std::numeric_limits<T>::max());
  if (scaled <= lo) return std::numeric_limits<T>::min();
  if (scaled >= hi) return std::numeric_limits<T>::max();
  return static_cast<T>(static_cast<int64_t>(scaled));  // Truncates toward zero (bool: then nonzero).
}

template <typename T>
LOCKSTEP_HOST_DEVICE inline T ScaleElement(T v, double factor) {
  if constexpr (std::is_integral_v<T>) {
    return ScaleInteger(v, factor);
  } else if constexpr (std::is_same_v<T, double>) {
    return v * factor;
  } else {
    return Store<T>(Load(v) * static_cast<float>(factor));
  }
}

// f64 -> f32 rounding to odd: truncate, then set the last bit if anything was
// lost. A following f32 -> f16/bf16 round-to-nearest-even then rounds the f64
// exactly once (f32 carries more than 2 extra bits over both).
LOCKSTEP_HOST_DEVICE inline float DoubleToFloatRoundToOdd(double d) {
  float f = static_cast<float>(d);
  if (d != d) return f;
  uint32_t bits;
  memcpy(&bits, &f, sizeof(bits));
  const double abs_f = f < 0 ? -static_cast<double>(f) : static_cast<double>(f);
  const double abs_d = d < 0 ? -d : d;
  if (abs_f > abs_d) --bits;  // Rounded away from zero: step back to truncation.
  float truncated;
  memcpy(&truncated, &bits, sizeof(bits));
  if (static_cast<double>(truncated) != d) bits |= 1;
  memcpy(&f, &bits, sizeof(bits));
  return f;
}

// Casts between the floating-point types.
template <typename To, typename From>
LOCKSTEP_HOST_DEVICE inline To CastElement(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, double>) {
    if constexpr (std::is_same_v<To, float>) {
      return static_cast<float>(v);
    } else {
      return Store<To>(DoubleToFloatRoundToOdd(v));
    }
  } else if constexpr (std::is_same_v<To, double>) {
    return static_cast<double>(Load(v));
  } else {
    return Store<To>(Load(v));  // Through exact f32.
  }
}

template <typename T>
LOCKSTEP_HOST_DEVICE inline bool IsFinite(T v) {
  if constexpr (std::is_integral_v<T>) {
    return true;
  } else {
    const auto a = Load(v);
    return a - a == a - a;  // Inf - Inf and NaN - NaN are NaN.
  }
}

}  // namespace elementwise
}  // namespace lockstep

#endif  // LOCKSTEP_CORE_INTERNAL_ELEMENTWISE_H_
