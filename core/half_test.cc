// Exhaustive checks of the f16/bf16 conversions against independent
// references: ldexp for the values of every bit pattern, the midpoints
// between every pair of neighbouring values for rounding, and gcc's _Float16
// (hardware-style IEEE conversion) for random floats.
#include "core/half.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "core/testing/float_bits.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using testing::Bits;
using testing::FromBits;

// The value of a binary16 bit pattern from the IEEE 754 definition.
double HalfValue(uint16_t h) {
  const int sign = (h & 0x8000) ? -1 : 1;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  if (exponent == 0x1f) {
    return mantissa ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  }
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

double BFloat16Value(uint16_t b) {
  const int sign = (b & 0x8000) ? -1 : 1;
  const int exponent = (b >> 7) & 0xff;
  const int mantissa = b & 0x7f;
  if (exponent == 0xff) {
    return mantissa ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  }
  if (exponent == 0) return sign * std::ldexp(mantissa, -133);
  return sign * std::ldexp(128 + mantissa, exponent - 134);
}

TEST(HalfTest, EveryBitPatternConvertsToItsExactValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = HalfToFloat(Half{static_cast<uint16_t>(h)});
    const double expected = HalfValue(static_cast<uint16_t>(h));
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_EQ(Bits(f) >> 31, h >> 15) << "sign of NaN " << std::hex << h;
      ASSERT_EQ((Bits(f) >> 13) & 0x3ff, (h & 0x3ff) | 0x200) << "quieted payload of " << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), expected) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    }
  }
}

// Every pattern comes back unchanged, except signaling NaNs, which come back
// quieted.
TEST(HalfTest, EveryBitPatternRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const Half in{static_cast<uint16_t>(h)};
    const bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    ASSERT_EQ(FloatToHalf(HalfToFloat(in)).bits, nan ? (h | 0x200) : h) << std::hex << h;
  }
}

// For each pair of neighbouring non-negative halves (lo, hi): the midpoint
// rounds to the one with an even mantissa, anything nearer rounds to the
// nearer one. 0x7c00 (Inf) stands for 65536, where rounding overflows. Both
// signs are checked.
TEST(HalfTest, RoundsToNearestEvenBetweenEveryNeighbours) {
  for (uint32_t lo = 0; lo < 0x7c00; ++lo) {
    const uint32_t hi = lo + 1;
    const double lo_value = HalfValue(static_cast<uint16_t>(lo));
    const double hi_value = hi == 0x7c00 ? 65536.0 : HalfValue(static_cast<uint16_t>(hi));
    const float mid = static_cast<float>((lo_value + hi_value) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo_value + hi_value) / 2) << "midpoint not exact";
    const uint32_t even = (lo & 1) ? hi : lo;
    const float below = std::nextafter(mid, 0.0f);
    const float above = std::nextafter(mid, std::numeric_limits<float>::infinity());
    for (int sign = 0; sign < 2; ++sign) {
      const float s = sign ? -1.0f : 1.0f;
      const uint32_t sb = sign ? 0x8000 : 0;
      ASSERT_EQ(FloatToHalf(s * mid).bits, even | sb) << std::hex << lo;
      ASSERT_EQ(FloatToHalf(s * below).bits, lo | sb) << std::hex << lo;
      ASSERT_EQ(FloatToHalf(s * above).bits, hi | sb) << std::hex << lo;
    }
  }
}

TEST(HalfTest, SpecialValues) {
  EXPECT_EQ(FloatToHalf(0.0f).bits, 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f).bits, 0x8000);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()).bits, 0x7c00);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::infinity()).bits, 0xfc00);
  EXPECT_EQ(FloatToHalf(65504.0f).bits, 0x7bff);
  EXPECT_EQ(FloatToHalf(1e10f).bits, 0x7c00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::max()).bits, 0x7c00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::denorm_min()).bits, 0x0000);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::denorm_min()).bits, 0x8000);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)).bits, 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)).bits, 0x0000);  // Tie to even (0).
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)).bits, 0x0001);
  // A signaling NaN whose payload lives only in the low bits stays a (quiet) NaN.
  EXPECT_EQ(FloatToHalf(FromBits(0x7f800001)).bits, 0x7e00);
  EXPECT_EQ(FloatToHalf(FromBits(0x7fc02000)).bits, 0x7e01);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
  EXPECT_EQ(FloatToHalf(FromBits(0xffc00000)).bits & 0x8000, 0x8000);
}

#if defined(__FLT16_MAX__)
// gcc's _Float16 conversion is an independent IEEE implementation.
TEST(HalfTest, MatchesCompilerFloat16OnRandomFloats) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 2000000; ++i) {
    const float f = FromBits(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    const _Float16 reference = static_cast<_Float16>(f);
    uint16_t bits;
    std::memcpy(&bits, &reference, sizeof(bits));
    ASSERT_EQ(FloatToHalf(f).bits, bits) << "float bits " << std::hex << Bits(f);
  }
}
#endif

TEST(BFloat16Test, EveryBitPatternConvertsToItsExactValue) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = BFloat16ToFloat(BFloat16{static_cast<uint16_t>(b)});
    const double expected = BFloat16Value(static_cast<uint16_t>(b));
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      ASSERT_EQ(Bits(f) >> 16, b) << std::hex << b;  // bf16 -> f32 is a plain shift.
    } else {
      ASSERT_EQ(static_cast<double>(f), expected) << std::hex << b;
      ASSERT_EQ(std::signbit(f), (b & 0x8000) != 0) << std::hex << b;
    }
  }
}

TEST(BFloat16Test, EveryBitPatternRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const BFloat16 in{static_cast<uint16_t>(b)};
    const bool nan = (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0;
    ASSERT_EQ(FloatToBFloat16(BFloat16ToFloat(in)).bits, nan ? (b | 0x40) : b) << std::hex << b;
  }
}

TEST(BFloat16Test, RoundsToNearestEvenBetweenEveryNeighbours) {
  for (uint32_t lo = 0; lo < 0x7f80; ++lo) {
    const uint32_t hi = lo + 1;
    const double lo_value = BFloat16Value(static_cast<uint16_t>(lo));
    const double hi_value = hi == 0x7f80 ? std::ldexp(1.0, 128) : BFloat16Value(static_cast<uint16_t>(hi));
    const double mid_value = (lo_value + hi_value) / 2;
    const float mid = static_cast<float>(mid_value);
    ASSERT_EQ(static_cast<double>(mid), mid_value) << "midpoint not exact";
    const uint32_t even = (lo & 1) ? hi : lo;
    const float below = std::nextafter(mid, 0.0f);
    const float above = std::nextafter(mid, std::numeric_limits<float>::infinity());
    for (int sign = 0; sign < 2; ++sign) {
      const float s = sign ? -1.0f : 1.0f;
      const uint32_t sb = sign ? 0x8000 : 0;
      ASSERT_EQ(FloatToBFloat16(s * mid).bits, even | sb) << std::hex << lo;
      ASSERT_EQ(FloatToBFloat16(s * below).bits, lo | sb) << std::hex << lo;
      ASSERT_EQ(FloatToBFloat16(s * above).bits, hi | sb) << std::hex << lo;
    }
  }
}

TEST(BFloat16Test, SpecialValues) {
  EXPECT_EQ(FloatToBFloat16(0.0f).bits, 0x0000);
  EXPECT_EQ(FloatToBFloat16(-0.0f).bits, 0x8000);
  EXPECT_EQ(FloatToBFloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::infinity()).bits, 0x7f80);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()).bits, 0x7f80);
  EXPECT_EQ(FloatToBFloat16(-std::numeric_limits<float>::max()).bits, 0xff80);
  EXPECT_EQ(FloatToBFloat16(FromBits(0x7f800001)).bits, 0x7fc0);
  EXPECT_EQ(FloatToBFloat16(FromBits(0xff810000)).bits, 0xffc1);
}

}  // namespace
}  // namespace lockstep
