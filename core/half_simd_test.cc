// The bulk (F16C when available) conversions agree with core/half.h bit for
// bit: every f16 pattern, every rounding boundary, and random floats.
#include "core/internal/half_simd.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(HalfSimdTest, UsesTheF16cPathExactlyWhenTheCpuHasIt) {
  // On x86-64 the F16C path is compiled in and chosen at run time; elsewhere
  // the scalar code is all there is.
  // The kernel's view of the CPU, independent of the code under test.
  bool cpu_has_f16c = false;
#if defined(__x86_64__)
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    line += ' ';
    cpu_has_f16c = line.find(" f16c ") != std::string::npos && line.find(" avx ") != std::string::npos;
    break;
  }
#endif
  std::printf("F16C path: %s\n", half_simd::UsesHardware() ? "yes" : "no");
  EXPECT_EQ(half_simd::UsesHardware(), cpu_has_f16c);
}

TEST(HalfSimdTest, EveryHalfPatternConvertsLikeTheScalarCode) {
  std::vector<Half> in(65536);
  for (uint32_t h = 0; h < 65536; ++h) in[h].bits = static_cast<uint16_t>(h);
  std::vector<float> bulk(65536);
  half_simd::HalfToFloat(in.data(), bulk.data(), 65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(Bits(bulk[h]), Bits(HalfToFloat(in[h]))) << std::hex << h;
  }
  // And back, NaNs included.
  std::vector<Half> back(65536);
  half_simd::FloatToHalf(bulk.data(), back.data(), 65536);
  for (uint32_t h = 0; h < 65536; ++h) ASSERT_EQ(back[h].bits, FloatToHalf(bulk[h]).bits) << h;
}

TEST(HalfSimdTest, RoundingBoundariesAndRandomFloatsMatchTheScalarCode) {
  std::vector<float> in;
  for (uint32_t lo = 0; lo < 0x7c00; ++lo) {
    const float a = HalfToFloat(Half{static_cast<uint16_t>(lo)});
    const float b = lo + 1 == 0x7c00 ? 65536.0f : HalfToFloat(Half{static_cast<uint16_t>(lo + 1)});
    const float mid = (a + b) / 2;
    for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      in.push_back(v);
      in.push_back(-v);
    }
  }
  std::mt19937 rng(42);
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    in.push_back(f);  // NaNs (signaling and quiet) included.
  }
  for (float f : {0.0f, -0.0f, INFINITY, -INFINITY, std::numeric_limits<float>::denorm_min(),
                  -std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max()}) {
    in.push_back(f);
  }
  std::vector<Half> bulk(in.size());
  half_simd::FloatToHalf(in.data(), bulk.data(), static_cast<int64_t>(in.size()));
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(bulk[i].bits, FloatToHalf(in[i]).bits) << "float bits " << std::hex << Bits(in[i]);
  }
}

TEST(BFloat16SimdTest, EveryPatternAndRandomFloatsMatchTheScalarCode) {
  std::vector<BFloat16> in(65536);
  for (uint32_t b = 0; b < 65536; ++b) in[b].bits = static_cast<uint16_t>(b);
  std::vector<float> bulk(65536);
  half_simd::BFloat16ToFloat(in.data(), bulk.data(), 65536);
  for (uint32_t b = 0; b < 65536; ++b) ASSERT_EQ(Bits(bulk[b]), Bits(BFloat16ToFloat(in[b]))) << b;
  std::vector<float> floats = bulk;  // Every bf16 value, NaNs included.
  std::mt19937 rng(5);
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    floats.push_back(f);
    // The rounding boundaries around it.
    const uint32_t mid = (bits & 0xffff0000u) | 0x8000u;
    std::memcpy(&f, &mid, 4);
    floats.push_back(f);
  }
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{15}, int64_t{17}, static_cast<int64_t>(floats.size())}) {
    std::vector<BFloat16> out(n);
    half_simd::FloatToBFloat16(floats.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[i].bits, FloatToBFloat16(floats[i]).bits) << "float bits " << std::hex << Bits(floats[i]);
    }
  }
}

TEST(HalfSimdTest, OddLengthsUseTheTail) {
  for (int64_t n : {0, 1, 7, 9, 17}) {
    std::vector<float> in(n), out(n);
    for (int64_t i = 0; i < n; ++i) in[i] = static_cast<float>(i) * 0.25f - 1;
    std::vector<Half> h(n);
    half_simd::FloatToHalf(in.data(), h.data(), n);
    half_simd::HalfToFloat(h.data(), out.data(), n);
    EXPECT_EQ(in, out) << n;  // Quarter steps are exact in f16.
  }
}

}  // namespace
}  // namespace lockstep
