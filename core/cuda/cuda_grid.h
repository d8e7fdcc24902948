// Launch geometry and dtype dispatch shared by the .cu files of core and nn
// (include from CUDA code only). Kernels use grid-stride loops, so any grid
// covers any count; the grid is capped to bound launch cost.
#ifndef LOCKSTEP_CORE_CUDA_CUDA_GRID_H_
#define LOCKSTEP_CORE_CUDA_CUDA_GRID_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "core/half.h"

namespace lockstep {
namespace cuda_grid {

// Values of core/dtype.h's DType (kept in sync by the gpu tests, which
// compare every dtype against the CPU kernels).
enum DTypeValue { kF32 = 0, kF64 = 1, kF16 = 2, kBF16 = 3, kI32 = 4, kI64 = 5, kU8 = 6, kI8 = 7, kBool = 8 };

constexpr int kThreads = 256;

inline unsigned Blocks(int64_t count) {
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 8 ? (blocks > 0 ? blocks : 1) : 65535 * 8);
}

// Calls fn(T{}) for a floating dtype value; cudaErrorInvalidValue otherwise.
template <typename Fn>
int VisitFloatDType(int dtype, Fn&& fn) {
  switch (dtype) {
    case kF32:
      return fn(float{});
    case kF64:
      return fn(double{});
    case kF16:
      return fn(Half{});
    case kBF16:
      return fn(BFloat16{});
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace cuda_grid
}  // namespace lockstep

// for (int64_t i = ...; i < count; i += stride) over the whole grid.
#define LOCKSTEP_GRID_LOOP(i, count)                                                         \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (count); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

#endif  // LOCKSTEP_CORE_CUDA_CUDA_GRID_H_
