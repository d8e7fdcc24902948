// Plain entry points into core/cuda/cuda_kernels.cu. They take enum values as
// integers and return cudaError_t as int, so the .cu file needs neither Abseil
// nor this project's Status types; core/cuda/cuda_runtime_cuda.cc wraps them.
#ifndef LOCKSTEP_CORE_CUDA_CUDA_KERNEL_LAUNCH_H_
#define LOCKSTEP_CORE_CUDA_CUDA_KERNEL_LAUNCH_H_

#include <cstdint>

namespace lockstep {
namespace cuda_internal {

inline constexpr int kMaxReduceInputs = 64;

int LaunchReduce(int op, int dtype, const void* const* inputs, int num_inputs, void* out, int64_t count, void* stream);
int LaunchScale(int dtype, void* data, int64_t count, double factor, void* stream);
int LaunchDivide(int dtype, void* data, int64_t count, int divisor, void* stream);
int LaunchCast(int from, const void* src, int to, void* dst, int64_t count, void* stream);
// Clears `*device_flag` (device memory) to 0 and writes 1 there if any element
// is Inf or NaN.
int LaunchAllFinite(int dtype, const void* data, int64_t count, int* device_flag, void* stream);

}  // namespace cuda_internal
}  // namespace lockstep

#endif  // LOCKSTEP_CORE_CUDA_CUDA_KERNEL_LAUNCH_H_
