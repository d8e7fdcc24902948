// The CPU implementations behind core/kernels.h, on raw pointers. Arguments
// are validated by core/kernels.h; call those functions instead.
#ifndef LOCKSTEP_CORE_CPU_KERNELS_H_
#define LOCKSTEP_CORE_CPU_KERNELS_H_

#include <cstdint>

#include "absl/types/span.h"
#include "core/dtype.h"
#include "core/reduce_op.h"

namespace lockstep {
namespace cpu {

void Reduce(ReduceOp op, DType dtype, absl::Span<const void* const> inputs, void* out, int64_t count);
void Scale(DType dtype, void* data, int64_t count, double factor);
void Divide(DType dtype, void* data, int64_t count, int divisor);
// Floating types only.
void Cast(DType from, const void* src, DType to, void* dst, int64_t count);
bool AllFinite(DType dtype, const void* data, int64_t count);

// The instruction set the kernels above use on this CPU: "avx2" or "baseline".
const char* KernelIsa();

}  // namespace cpu
}  // namespace lockstep

#endif  // LOCKSTEP_CORE_CPU_KERNELS_H_
