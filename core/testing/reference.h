// Independent reference arithmetic for kernel tests: scalar code written from
// the definitions (IEEE conversions via gcc's _Float16 and a nearest-value
// search for bf16, integer wrap-around via explicit masking), sharing nothing
// with core/internal/elementwise.h.
#ifndef LOCKSTEP_CORE_TESTING_REFERENCE_H_
#define LOCKSTEP_CORE_TESTING_REFERENCE_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"
#include "core/reduce_op.h"

namespace lockstep {
namespace reference {

inline float ToFloat(Half h) {
  _Float16 v;
  std::memcpy(&v, &h.bits, 2);
  return static_cast<float>(v);
}

inline float ToFloat(BFloat16 b) {
  const uint32_t bits = static_cast<uint32_t>(b.bits) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline Half HalfFromFloat(float f) {
  const _Float16 v = static_cast<_Float16>(f);
  Half h;
  std::memcpy(&h.bits, &v, 2);
  return h;
}

// Round to nearest even by comparing the distances to the two bf16 values
// that bracket `d`, in double.
inline BFloat16 BFloat16FromDouble(double d) {
  if (std::isnan(d)) return BFloat16{0x7fc0};
  const uint16_t sign = std::signbit(d) ? 0x8000 : 0;
  const double a = std::fabs(d);
  if (a >= std::ldexp(1.0, 128)) return BFloat16{static_cast<uint16_t>(sign | 0x7f80)};
  // The largest bf16 magnitude <= a: truncate a's float bits (float toward zero first).
  float f = static_cast<float>(a);
  if (static_cast<double>(f) > a) f = std::nextafter(f, 0.0f);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t lo = static_cast<uint16_t>(bits >> 16);
  const uint16_t hi = static_cast<uint16_t>(lo + 1);
  const double lo_value = ToFloat(BFloat16{lo});
  if (lo_value == a) return BFloat16{static_cast<uint16_t>(sign | lo)};
  const double hi_value = hi == 0x7f80 ? std::ldexp(1.0, 128) : static_cast<double>(ToFloat(BFloat16{hi}));
  uint16_t pick;
  if (a - lo_value < hi_value - a) {
    pick = lo;
  } else if (a - lo_value > hi_value - a) {
    pick = hi;
  } else {
    pick = (lo & 1) ? hi : lo;
  }
  return BFloat16{static_cast<uint16_t>(sign | pick)};
}

inline BFloat16 BFloat16FromFloat(float f) { return BFloat16FromDouble(f); }

inline Half HalfFromDouble(double d) {
  const _Float16 v = static_cast<_Float16>(d);  // Rounds once (libgcc __truncdfhf2).
  Half h;
  std::memcpy(&h.bits, &v, 2);
  return h;
}

template <typename T>
double ToDouble(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return ToFloat(v);
  } else {
    return static_cast<double>(v);
  }
}

// Elements are compared bit for bit, except that any NaN equals any NaN.
template <typename T>
bool SameElement(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return a == b;
  } else {
    const double x = ToDouble(a), y = ToDouble(b);
    if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
    return std::memcmp(&a, &b, sizeof(T)) == 0;
  }
}

// One element of Reduce(op, inputs): floats accumulate in float (f16, bf16,
// f32) or double (f64) and round once; integers wrap modulo 2^bits; bool is
// logic (SUM and MAX: any true; PROD and MIN: all true); BAND, BOR and BXOR
// combine the bits.
template <typename T>
T ReduceElement(ReduceOp op, const std::vector<T>& values) {
  const size_t n = values.size();
  if constexpr (std::is_same_v<T, bool>) {
    size_t trues = 0;
    for (bool v : values) trues += v ? 1 : 0;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMax:
      case ReduceOp::kBor:
        return trues > 0;
      case ReduceOp::kProd:
      case ReduceOp::kMin:
      case ReduceOp::kBand:
        return trues == n;
      case ReduceOp::kBxor:
        return trues % 2 == 1;
      case ReduceOp::kAvg:
        break;
    }
    return false;
  } else if constexpr (std::is_integral_v<T>) {
    constexpr int bits = 8 * sizeof(T);
    const uint64_t mask = bits == 64 ? ~uint64_t{0} : ((uint64_t{1} << bits) - 1);
    auto wrap = [&](uint64_t v) {
      uint64_t m = v & mask;
      T out;
      std::memcpy(&out, &m, sizeof(T));  // Little-endian: low bytes.
      return out;
    };
    uint64_t acc = static_cast<uint64_t>(static_cast<int64_t>(values[0]));
    T best = values[0];
    for (size_t k = 1; k < n; ++k) {
      const uint64_t v = static_cast<uint64_t>(static_cast<int64_t>(values[k]));
      if (op == ReduceOp::kSum || op == ReduceOp::kAvg) acc += v;
      if (op == ReduceOp::kProd) acc *= v;
      if (op == ReduceOp::kBand) acc &= v;
      if (op == ReduceOp::kBor) acc |= v;
      if (op == ReduceOp::kBxor) acc ^= v;
      if (op == ReduceOp::kMin) best = std::min(best, values[k]);
      if (op == ReduceOp::kMax) best = std::max(best, values[k]);
    }
    if (op == ReduceOp::kMin || op == ReduceOp::kMax) return best;
    const T sum = wrap(acc);
    // Truncation toward zero, in int64 (a world size may not fit an int8).
    if (op == ReduceOp::kAvg) return static_cast<T>(static_cast<int64_t>(sum) / static_cast<int64_t>(n));
    return sum;
  } else {
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    A acc = static_cast<A>(ToDouble(values[0]));
    for (size_t k = 1; k < n; ++k) {
      const A v = static_cast<A>(ToDouble(values[k]));
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          acc = acc + v;
          break;
        case ReduceOp::kProd:
          acc = acc * v;
          break;
        // NaN wins; between equal values (-0 and +0) the later input wins.
        case ReduceOp::kMin:
          acc = (std::isnan(acc) || std::isnan(v)) ? std::numeric_limits<A>::quiet_NaN() : (acc < v ? acc : v);
          break;
        case ReduceOp::kMax:
          acc = (std::isnan(acc) || std::isnan(v)) ? std::numeric_limits<A>::quiet_NaN() : (acc > v ? acc : v);
          break;
        default:
          break;  // Bitwise ops do not apply to floating types.
      }
    }
    if (op == ReduceOp::kAvg) acc = acc / static_cast<A>(n);
    if constexpr (std::is_same_v<T, Half>) {
      return HalfFromFloat(acc);
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      return BFloat16FromFloat(acc);
    } else {
      return acc;
    }
  }
}

// Random values of type T; for floats a mix of ordinary values in [-4, 4),
// some tiny and huge ones, and (if `specials`) ±0, ±Inf and NaN.
template <typename T>
std::vector<T> RandomValues(int64_t count, uint32_t seed, bool specials = true) {
  std::mt19937 rng(seed);
  std::vector<T> out(static_cast<size_t>(count));
  for (size_t i = 0; i < out.size(); ++i) {
    if constexpr (std::is_same_v<T, bool>) {
      out[i] = (rng() & 1) != 0;  // std::vector<bool>: no references to elements.
    } else if constexpr (std::is_integral_v<T>) {
      T& v = out[i];
      uint64_t r = (static_cast<uint64_t>(rng()) << 32) | rng();
      std::memcpy(&v, &r, sizeof(T));
    } else {
      T& v = out[i];
      std::uniform_real_distribution<double> uniform(-4.0, 4.0);
      double d = uniform(rng);
      const uint32_t pick = rng() % 100;
      if (pick == 0) d *= 1e-6;
      if (pick == 1) d *= 1e4;
      if (specials && pick == 2) d = (rng() & 1) ? -0.0 : 0.0;
      if (specials && pick == 3) d = (rng() & 1) ? -INFINITY : INFINITY;
      if (specials && pick == 4) d = NAN;
      if constexpr (std::is_same_v<T, Half>) {
        v = HalfFromFloat(static_cast<float>(d));
      } else if constexpr (std::is_same_v<T, BFloat16>) {
        v = BFloat16FromFloat(static_cast<float>(d));
      } else {
        v = static_cast<T>(d);
      }
    }
  }
  return out;
}

}  // namespace reference
}  // namespace lockstep

#endif  // LOCKSTEP_CORE_TESTING_REFERENCE_H_
