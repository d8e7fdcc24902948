// GPU kernel and copy throughput (bytes of output per second). Built and run
// by tools/gpu_check.sh; exits quietly with a note when no GPU is visible.
#include <cstdio>

#include "benchmark/benchmark.h"
#include "core/cuda/cuda_runtime.h"
#include "core/kernels.h"

namespace lockstep {
namespace {

void BM_CudaReduceSum(benchmark::State& state, DType dtype) {
  const int64_t n = state.range(0);
  Tensor a = *Tensor::Zeros({n}, dtype, Device::Cuda(0));
  Tensor b = *Tensor::Zeros({n}, dtype, Device::Cuda(0));
  for (auto _ : state) benchmark::DoNotOptimize(ReduceInto(ReduceOp::kSum, b, a).ok());
  state.SetBytesProcessed(state.iterations() * a.nbytes());
}
BENCHMARK_CAPTURE(BM_CudaReduceSum, f32, DType::kF32)->Range(1 << 16, 1 << 26)->UseRealTime();
BENCHMARK_CAPTURE(BM_CudaReduceSum, bf16, DType::kBF16)->Range(1 << 16, 1 << 26)->UseRealTime();

void BM_CudaCastF32ToF16(benchmark::State& state) {
  Tensor src = *Tensor::Zeros({state.range(0)}, DType::kF32, Device::Cuda(0));
  Tensor dst = *Tensor::Zeros({state.range(0)}, DType::kF16, Device::Cuda(0));
  for (auto _ : state) benchmark::DoNotOptimize(Cast(src, dst).ok());
  state.SetBytesProcessed(state.iterations() * src.nbytes());
}
BENCHMARK(BM_CudaCastF32ToF16)->Arg(1 << 26)->UseRealTime();

void BM_HostToDevice(benchmark::State& state, bool pinned) {
  Tensor host = *Tensor::Empty({state.range(0)}, DType::kF32, Device::Cpu(), pinned);
  Tensor gpu = *Tensor::Empty({state.range(0)}, DType::kF32, Device::Cuda(0));
  for (auto _ : state) benchmark::DoNotOptimize(gpu.CopyFrom(host).ok());
  state.SetBytesProcessed(state.iterations() * host.nbytes());
}
BENCHMARK_CAPTURE(BM_HostToDevice, pageable, false)->Arg(1 << 24)->UseRealTime();
BENCHMARK_CAPTURE(BM_HostToDevice, pinned, true)->Arg(1 << 24)->UseRealTime();

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  if (lockstep::cuda::DeviceCount() == 0) {
    std::printf("cuda_kernels_benchmark: no CUDA device visible; nothing to measure\n");
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
