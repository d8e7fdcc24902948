// 16-bit floating point: IEEE binary16 (`Half`, f16) and bfloat16 (`BFloat16`).
//
// Both are stored as their raw bits; arithmetic happens in f32. Conversions
// from f32 round to nearest, ties to even, and handle every input:
//   * ±0, subnormals (f16 keeps its subnormals; f32 subnormals become ±0 in f16),
//   * overflow to ±Inf (f16: |x| >= 65520; bf16: above the largest bf16 after
//     rounding),
//   * NaN stays NaN with its sign and the top bits of its payload, and is
//     quieted (the top mantissa bit set), as IEEE 754 conversions and the x86
//     F16C instructions do; so the bulk conversions in
//     core/internal/half_simd.h may use the hardware and agree bit for bit.
// Conversions to f32 are exact for every non-NaN value. Hence
// `FloatToHalf(HalfToFloat(h))` returns `h` for every bit pattern except
// signaling NaNs, which come back quieted; likewise for bf16.
//
// The functions are usable from CUDA device code (the header is shared by the
// CPU and CUDA kernels so both round identically).
#ifndef LOCKSTEP_CORE_HALF_H_
#define LOCKSTEP_CORE_HALF_H_

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define LOCKSTEP_HOST_DEVICE __host__ __device__
#else
#define LOCKSTEP_HOST_DEVICE
#endif

namespace lockstep {

struct Half {
  uint16_t bits;
};

struct BFloat16 {
  uint16_t bits;
};

namespace half_internal {

LOCKSTEP_HOST_DEVICE inline uint32_t FloatBits(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof(x));
  return x;
}

LOCKSTEP_HOST_DEVICE inline float BitsToFloat(uint32_t x) {
  float f;
  memcpy(&f, &x, sizeof(f));
  return f;
}

// Rounds `value >> shift` to nearest, ties to even (shift >= 1).
LOCKSTEP_HOST_DEVICE inline uint32_t ShiftRightRne(uint32_t value, uint32_t shift) {
  const uint32_t result = value >> shift;
  const uint32_t remainder = value & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (remainder > halfway || (remainder == halfway && (result & 1))) return result + 1;
  return result;
}

}  // namespace half_internal

LOCKSTEP_HOST_DEVICE inline float HalfToFloat(Half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1f;
  uint32_t mantissa = h.bits & 0x3ff;
  if (exponent == 0x1f) {  // Inf, or NaN: keep the payload, set the quiet bit.
    const uint32_t quiet = mantissa != 0 ? 0x00400000u : 0;
    return half_internal::BitsToFloat(sign | 0x7f800000u | quiet | (mantissa << 13));
  }
  if (exponent != 0) {  // Normal: rebias 15 -> 127.
    return half_internal::BitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
  }
  if (mantissa == 0) return half_internal::BitsToFloat(sign);
  // Subnormal half = mantissa * 2^-24: normalize it into an f32 normal.
  uint32_t float_exponent = 113;  // f32 biased exponent of 2^-14.
  while ((mantissa & 0x400) == 0) {
    mantissa <<= 1;
    --float_exponent;
  }
  mantissa &= 0x3ff;
  return half_internal::BitsToFloat(sign | (float_exponent << 23) | (mantissa << 13));
}

LOCKSTEP_HOST_DEVICE inline Half FloatToHalf(float f) {
  const uint32_t x = half_internal::FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // Inf or NaN.
    if (magnitude == 0x7f800000u) return Half{static_cast<uint16_t>(sign | 0x7c00)};
    const uint32_t payload = (magnitude >> 13) & 0x3ff;
    return Half{static_cast<uint16_t>(sign | 0x7e00 | payload)};
  }
  if (magnitude >= 0x477ff000u) {  // >= 65520: rounds past 65504 to Inf.
    return Half{static_cast<uint16_t>(sign | 0x7c00)};
  }
  if (magnitude >= 0x38800000u) {  // >= 2^-14: a normal half.
    // Rebias (127 -> 15) and drop 13 mantissa bits; a carry out of the
    // mantissa correctly bumps the exponent.
    const uint32_t rebiased = magnitude - (112u << 23);
    return Half{static_cast<uint16_t>(sign | half_internal::ShiftRightRne(rebiased, 13))};
  }
  // Below 2^-14: a half subnormal in units of 2^-24, or zero.
  const uint32_t exponent = magnitude >> 23;
  if (exponent < 102) return Half{sign};  // < 2^-25: rounds to zero.
  const uint32_t mantissa = (magnitude & 0x7fffff) | 0x800000;
  // value = mantissa * 2^(exponent - 150) = (mantissa >> (126 - exponent)) * 2^-24.
  return Half{static_cast<uint16_t>(sign | half_internal::ShiftRightRne(mantissa, 126 - exponent))};
}

LOCKSTEP_HOST_DEVICE inline float BFloat16ToFloat(BFloat16 b) {
  return half_internal::BitsToFloat(static_cast<uint32_t>(b.bits) << 16);
}

LOCKSTEP_HOST_DEVICE inline BFloat16 FloatToBFloat16(float f) {
  const uint32_t x = half_internal::FloatBits(f);
  // Round to nearest even on the low 16 bits; overflow carries into Inf.
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1)) >> 16;
  // NaN: keep sign and payload top, quiet it. Both are computed and one is
  // selected so that loops over this function vectorize.
  const uint32_t nan = (x >> 16) | 0x40;
  const bool is_nan = (x & 0x7fffffffu) > 0x7f800000u;
  return BFloat16{static_cast<uint16_t>(is_nan ? nan : rounded)};
}

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_HALF_H_
