// Declarations of the per-instruction-set CPU kernels (see
// cpu_kernels_impl.h); core/cpu_kernels.cc dispatches among them.
#ifndef LOCKSTEP_CORE_INTERNAL_CPU_KERNELS_ISA_H_
#define LOCKSTEP_CORE_INTERNAL_CPU_KERNELS_ISA_H_

#include <cstdint>

#include "absl/types/span.h"
#include "core/dtype.h"
#include "core/reduce_op.h"

#define LOCKSTEP_DECLARE_CPU_KERNELS(isa)                                                                \
  namespace lockstep {                                                                                   \
  namespace cpu {                                                                                        \
  namespace isa {                                                                                        \
  void Reduce(ReduceOp op, DType dtype, absl::Span<const void* const> inputs, void* out, int64_t count); \
  void Scale(DType dtype, void* data, int64_t count, double factor);                                     \
  void Divide(DType dtype, void* data, int64_t count, int divisor);                                      \
  void Cast(DType from, const void* src, DType to, void* dst, int64_t count);                            \
  bool AllFinite(DType dtype, const void* data, int64_t count);                                          \
  }                                                                                                      \
  }                                                                                                      \
  }

LOCKSTEP_DECLARE_CPU_KERNELS(baseline)
LOCKSTEP_DECLARE_CPU_KERNELS(avx2)

#undef LOCKSTEP_DECLARE_CPU_KERNELS

#endif  // LOCKSTEP_CORE_INTERNAL_CPU_KERNELS_ISA_H_
