#include "core/internal/half_simd.h"

#include "core/internal/bf16_avx2.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace lockstep {
namespace half_simd {

void HalfToFloatScalar(const Half* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = lockstep::HalfToFloat(in[i]);
}

void FloatToHalfScalar(const float* in, Half* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = lockstep::FloatToHalf(in[i]);
}

void BFloat16ToFloatScalar(const BFloat16* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = lockstep::BFloat16ToFloat(in[i]);
}

void FloatToBFloat16Scalar(const float* in, BFloat16* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = lockstep::FloatToBFloat16(in[i]);
}

#if defined(__x86_64__)
namespace {

bool DetectAvx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
}

bool UsesAvx2() {
  static const bool has_avx2 = DetectAvx2();  // Immutable after first use.
  return has_avx2;
}

__attribute__((target("avx2"))) void BFloat16ToFloatAvx2(const BFloat16* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, bf16_avx2::Widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  }
  BFloat16ToFloatScalar(in + i, out + i, n - i);
}

__attribute__((target("avx2"))) void FloatToBFloat16Avx2(const float* in, BFloat16* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i packed =
        bf16_avx2::Narrow(bf16_avx2::Round(_mm256_loadu_ps(in + i)), bf16_avx2::Round(_mm256_loadu_ps(in + i + 8)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), packed);
  }
  FloatToBFloat16Scalar(in + i, out + i, n - i);
}

bool DetectF16c() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
}

__attribute__((target("avx,f16c"))) void HalfToFloatF16c(const Half* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  HalfToFloatScalar(in + i, out + i, n - i);
}

__attribute__((target("avx,f16c"))) void FloatToHalfF16c(const float* in, Half* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  FloatToHalfScalar(in + i, out + i, n - i);
}

}  // namespace

bool UsesHardware() {
  static const bool has_f16c = DetectF16c();  // Immutable after first use.
  return has_f16c;
}

void HalfToFloat(const Half* in, float* out, int64_t n) {
  if (UsesHardware()) {
    HalfToFloatF16c(in, out, n);
  } else {
    HalfToFloatScalar(in, out, n);
  }
}

void FloatToHalf(const float* in, Half* out, int64_t n) {
  if (UsesHardware()) {
    FloatToHalfF16c(in, out, n);
  } else {
    FloatToHalfScalar(in, out, n);
  }
}

void BFloat16ToFloat(const BFloat16* in, float* out, int64_t n) {
  if (UsesAvx2()) {
    BFloat16ToFloatAvx2(in, out, n);
  } else {
    BFloat16ToFloatScalar(in, out, n);
  }
}

void FloatToBFloat16(const float* in, BFloat16* out, int64_t n) {
  if (UsesAvx2()) {
    FloatToBFloat16Avx2(in, out, n);
  } else {
    FloatToBFloat16Scalar(in, out, n);
  }
}

#else  // Not x86-64: the portable loops.

void BFloat16ToFloat(const BFloat16* in, float* out, int64_t n) { BFloat16ToFloatScalar(in, out, n); }
void FloatToBFloat16(const float* in, BFloat16* out, int64_t n) { FloatToBFloat16Scalar(in, out, n); }

bool UsesHardware() { return false; }
void HalfToFloat(const Half* in, float* out, int64_t n) { HalfToFloatScalar(in, out, n); }
void FloatToHalf(const float* in, Half* out, int64_t n) { FloatToHalfScalar(in, out, n); }

#endif

}  // namespace half_simd
}  // namespace lockstep
