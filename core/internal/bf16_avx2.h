// AVX2 bf16 helpers shared by the bulk conversions (half_simd.cc, compiled
// for any x86-64 and dispatched at run time) and the AVX2 kernels. Same bits
// as core/half.h: round to nearest even, NaN quieted.
#ifndef LOCKSTEP_CORE_INTERNAL_BF16_AVX2_H_
#define LOCKSTEP_CORE_INTERNAL_BF16_AVX2_H_

#if defined(__x86_64__)
#include <immintrin.h>

namespace lockstep {
namespace bf16_avx2 {

// Eight bf16 (in a 128-bit register) widened to eight floats.
__attribute__((target("avx2"))) inline __m256 Widen(__m128i bf16) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bf16), 16));
}

// Eight floats rounded to bf16, in the low 16 bits of each 32-bit lane.
__attribute__((target("avx2"))) inline __m256i Round(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
  const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
}

// Two rounded halves (Round of 8 + 8 floats) to 16 bf16 in order.
__attribute__((target("avx2"))) inline __m256i Narrow(__m256i lo, __m256i hi) {
  // packus works per 128-bit lane: reorder the 64-bit quarters after it.
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
}

}  // namespace bf16_avx2
}  // namespace lockstep

#endif  // __x86_64__
#endif  // LOCKSTEP_CORE_INTERNAL_BF16_AVX2_H_
