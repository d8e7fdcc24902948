// Bulk f16/bf16 <-> f32 conversion for the CPU kernels. Uses the x86 F16C
// instructions when the CPU has them (checked once at run time) and the
// scalar functions of core/half.h otherwise; both give identical bits
// (half_simd_test checks every f16 pattern and every rounding boundary).
#ifndef LOCKSTEP_CORE_INTERNAL_HALF_SIMD_H_
#define LOCKSTEP_CORE_INTERNAL_HALF_SIMD_H_

#include <cstdint>

#include "core/half.h"

namespace lockstep {
namespace half_simd {

// True when the F16C path is in use on this CPU.
bool UsesHardware();

void HalfToFloat(const Half* in, float* out, int64_t n);
void FloatToHalf(const float* in, Half* out, int64_t n);

// bf16: the same bits as core/half.h (round to nearest even, NaN quieted),
// with AVX2 where the CPU has it.
void BFloat16ToFloat(const BFloat16* in, float* out, int64_t n);
void FloatToBFloat16(const float* in, BFloat16* out, int64_t n);

// The portable versions, always available (for tests and non-x86 CPUs).
void BFloat16ToFloatScalar(const BFloat16* in, float* out, int64_t n);
void FloatToBFloat16Scalar(const float* in, BFloat16* out, int64_t n);
void HalfToFloatScalar(const Half* in, float* out, int64_t n);
void FloatToHalfScalar(const float* in, Half* out, int64_t n);

}  // namespace half_simd
}  // namespace lockstep

#endif  // LOCKSTEP_CORE_INTERNAL_HALF_SIMD_H_
