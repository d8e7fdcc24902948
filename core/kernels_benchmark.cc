// Throughput of the CPU kernels: bytes of output per second.
//   bazel run -c opt //core:kernels_benchmark
#include <vector>

#include "benchmark/benchmark.h"
#include "core/kernels.h"

namespace lockstep {
namespace {

void BM_ReduceSum(benchmark::State& state, DType dtype) {
  const int64_t n = state.range(0);
  Tensor a = *Tensor::Zeros({n}, dtype);
  Tensor b = *Tensor::Zeros({n}, dtype);
  for (auto _ : state) {
    benchmark::DoNotOptimize(ReduceInto(ReduceOp::kSum, b, a).ok());
  }
  state.SetBytesProcessed(state.iterations() * a.nbytes());
}
BENCHMARK_CAPTURE(BM_ReduceSum, f32, DType::kF32)->Range(1 << 10, 1 << 22);
BENCHMARK_CAPTURE(BM_ReduceSum, f16, DType::kF16)->Range(1 << 10, 1 << 22);
BENCHMARK_CAPTURE(BM_ReduceSum, bf16, DType::kBF16)->Range(1 << 10, 1 << 22);

void BM_Cast(benchmark::State& state, DType from, DType to) {
  const int64_t n = state.range(0);
  Tensor src = *Tensor::Zeros({n}, from);
  Tensor dst = *Tensor::Zeros({n}, to);
  for (auto _ : state) benchmark::DoNotOptimize(Cast(src, dst).ok());
  state.SetBytesProcessed(state.iterations() * dst.nbytes());
}
BENCHMARK_CAPTURE(BM_Cast, f32_to_f16, DType::kF32, DType::kF16)->Arg(1 << 20);
BENCHMARK_CAPTURE(BM_Cast, f32_to_bf16, DType::kF32, DType::kBF16)->Arg(1 << 20);
BENCHMARK_CAPTURE(BM_Cast, f16_to_f32, DType::kF16, DType::kF32)->Arg(1 << 20);

void BM_AllFinite(benchmark::State& state) {
  Tensor t = *Tensor::Zeros({state.range(0)}, DType::kF32);
  for (auto _ : state) benchmark::DoNotOptimize(*AllFinite(t));
  state.SetBytesProcessed(state.iterations() * t.nbytes());
}
BENCHMARK(BM_AllFinite)->Arg(1 << 20);

void BM_Scale(benchmark::State& state) {
  Tensor t = *Tensor::Zeros({state.range(0)}, DType::kF32);
  for (auto _ : state) benchmark::DoNotOptimize(Scale(t, 0.5).ok());
  state.SetBytesProcessed(state.iterations() * t.nbytes());
}
BENCHMARK(BM_Scale)->Arg(1 << 20);

}  // namespace
}  // namespace lockstep
