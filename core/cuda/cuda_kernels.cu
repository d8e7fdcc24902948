// CUDA versions of the elementwise kernels in core/kernels.h. The arithmetic
// is core/internal/elementwise.h, shared with the CPU kernels, so results are
// bit-identical. Grid-stride loops; one launch per call.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/cuda_grid.h"
#include "core/cuda/cuda_kernel_launch.h"
#include "core/half.h"
#include "core/internal/elementwise.h"

namespace lockstep {
namespace cuda_internal {
namespace {

namespace ew = ::lockstep::elementwise;

using namespace ::lockstep::cuda_grid;  // NOLINT: kThreads, Blocks, dtype values

// Enum values of core/reduce_op.h (kept in sync by cuda_kernels_test
// comparing against the CPU kernels for every value).
enum OpValue { kSum = 0, kAvg = 1, kProd = 2, kMin = 3, kMax = 4, kBand = 5, kBor = 6, kBxor = 7 };

struct InputPointers {
  const void* ptr[kMaxReduceInputs];
};

template <typename T, typename Op, bool kAverage>
__global__ void ReduceKernel(InputPointers inputs, int num_inputs, T* out, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    ew::Acc<T> acc = ew::Load(static_cast<const T*>(inputs.ptr[0])[i]);
    for (int k = 1; k < num_inputs; ++k) {
      acc = Op::Apply(acc, static_cast<ew::Acc<T>>(ew::Load(static_cast<const T*>(inputs.ptr[k])[i])));
    }
    if (kAverage) acc = ew::DivideBy(acc, num_inputs);
    out[i] = ew::Store<T>(acc);
  }
}

template <typename T>
__global__ void ScaleKernel(T* data, int64_t count, double factor) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    data[i] = ew::ScaleElement(data[i], factor);
  }
}

template <typename T>
__global__ void DivideKernel(T* data, int64_t count, int divisor) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    data[i] = ew::Store<T>(ew::DivideBy(static_cast<ew::Acc<T>>(ew::Load(data[i])), divisor));
  }
}

template <typename To, typename From>
__global__ void CastKernel(const From* src, To* dst, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = ew::CastElement<To>(src[i]);
  }
}

template <typename T>
__global__ void AllFiniteKernel(const T* data, int64_t count, int* flag) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (!ew::IsFinite(data[i])) *flag = 1;  // Benign race: every writer writes 1.
  }
}

template <typename Fn>
int VisitDType(int dtype, Fn&& fn) {
  switch (dtype) {
    case kF32:
      return fn(float{});
    case kF64:
      return fn(double{});
    case kF16:
      return fn(Half{});
    case kBF16:
      return fn(BFloat16{});
    case kI32:
      return fn(int32_t{});
    case kI64:
      return fn(int64_t{});
    case kU8:
      return fn(uint8_t{});
    case kI8:
      return fn(int8_t{});
    case kBool:
      return fn(bool{});
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

template <typename T, typename Op>
int LaunchReduceTyped(bool average, const InputPointers& inputs, int n, void* out, int64_t count, cudaStream_t stream) {
  if (average) {
    ReduceKernel<T, Op, true><<<Blocks(count), kThreads, 0, stream>>>(inputs, n, static_cast<T*>(out), count);
  } else {
    ReduceKernel<T, Op, false><<<Blocks(count), kThreads, 0, stream>>>(inputs, n, static_cast<T*>(out), count);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int LaunchReduce(int op, int dtype, const void* const* inputs, int num_inputs, void* out, int64_t count, void* stream) {
  if (count == 0) return 0;
  if (num_inputs < 1 || num_inputs > kMaxReduceInputs) return static_cast<int>(cudaErrorInvalidValue);
  InputPointers pointers{};
  for (int k = 0; k < num_inputs; ++k) pointers.ptr[k] = inputs[k];
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return VisitDType(dtype, [&](auto zero) {
    using T = decltype(zero);
    switch (op) {
      case kSum:
        return LaunchReduceTyped<T, ew::SumOp>(false, pointers, num_inputs, out, count, s);
      case kAvg:
        return LaunchReduceTyped<T, ew::SumOp>(true, pointers, num_inputs, out, count, s);
      case kProd:
        return LaunchReduceTyped<T, ew::ProdOp>(false, pointers, num_inputs, out, count, s);
      case kMin:
        return LaunchReduceTyped<T, ew::MinOp>(false, pointers, num_inputs, out, count, s);
      case kMax:
        return LaunchReduceTyped<T, ew::MaxOp>(false, pointers, num_inputs, out, count, s);
      case kBand:
        return LaunchReduceTyped<T, ew::BandOp>(false, pointers, num_inputs, out, count, s);
      case kBor:
        return LaunchReduceTyped<T, ew::BorOp>(false, pointers, num_inputs, out, count, s);
      case kBxor:
        return LaunchReduceTyped<T, ew::BxorOp>(false, pointers, num_inputs, out, count, s);
    }
    return static_cast<int>(cudaErrorInvalidValue);
  });
}

int LaunchScale(int dtype, void* data, int64_t count, double factor, void* stream) {
  if (count == 0) return 0;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return VisitDType(dtype, [&](auto zero) {
    using T = decltype(zero);
    ScaleKernel<T><<<Blocks(count), kThreads, 0, s>>>(static_cast<T*>(data), count, factor);
    return static_cast<int>(cudaGetLastError());
  });
}

int LaunchDivide(int dtype, void* data, int64_t count, int divisor, void* stream) {
  if (count == 0) return 0;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return VisitDType(dtype, [&](auto zero) {
    using T = decltype(zero);
    DivideKernel<T><<<Blocks(count), kThreads, 0, s>>>(static_cast<T*>(data), count, divisor);
    return static_cast<int>(cudaGetLastError());
  });
}

int LaunchCast(int from, const void* src, int to, void* dst, int64_t count, void* stream) {
  if (count == 0) return 0;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return VisitFloatDType(from, [&](auto from_zero) {
    using From = decltype(from_zero);
    return VisitFloatDType(to, [&](auto to_zero) {
      using To = decltype(to_zero);
      CastKernel<To, From>
          <<<Blocks(count), kThreads, 0, s>>>(static_cast<const From*>(src), static_cast<To*>(dst), count);
      return static_cast<int>(cudaGetLastError());
    });
  });
}

int LaunchAllFinite(int dtype, const void* data, int64_t count, int* device_flag, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t err = cudaMemsetAsync(device_flag, 0, sizeof(int), s);
  if (err != cudaSuccess || count == 0) return static_cast<int>(err);
  return VisitDType(dtype, [&](auto zero) {
    using T = decltype(zero);
    AllFiniteKernel<T><<<Blocks(count), kThreads, 0, s>>>(static_cast<const T*>(data), count, device_flag);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace cuda_internal
}  // namespace lockstep
