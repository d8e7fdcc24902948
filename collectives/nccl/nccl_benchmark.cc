// Time of NCCL operations on one GPU (a world of one: the only NCCL figure
// one GPU gives — launch, event and front overheads plus NCCL's copy).
// Built and run by tools/gpu_check.sh; exits quietly without a GPU or NCCL.
#include <cstdio>
#include <memory>

#include "benchmark/benchmark.h"
#include "collectives/communicator.h"
#include "collectives/nccl/nccl_communicator.h"
#include "collectives/store/hash_store.h"
#include "core/cuda/cuda_runtime.h"

namespace lockstep {
namespace {

enum class Op { kAllReduce, kBroadcast, kAllGather };

void BM_Nccl(benchmark::State& state, Op op) {
  auto comm = CreateNcclCommunicator(std::make_shared<HashStore>(), 0, 1, Device::Cuda(0), {});
  if (!comm.ok()) {
    state.SkipWithError(std::string(comm.status().message()).c_str());
    return;
  }
  const int64_t n = state.range(0) / 4;
  Tensor in = *Tensor::Zeros({n}, DType::kF32, Device::Cuda(0));
  Tensor out = *Tensor::Zeros({n}, DType::kF32, Device::Cuda(0));
  for (auto _ : state) {
    std::shared_ptr<Work> work = op == Op::kAllReduce   ? (*comm)->AllReduce(in, out, ReduceOp::kSum)
                                 : op == Op::kBroadcast ? (*comm)->Broadcast(in, 0)
                                                        : (*comm)->AllGather(in, out);
    if (!work->Wait().ok()) {
      state.SkipWithError("operation failed");
      return;
    }
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK_CAPTURE(BM_Nccl, all_reduce_f32, Op::kAllReduce)->RangeMultiplier(16)->Range(8, 1 << 28)->UseRealTime();
BENCHMARK_CAPTURE(BM_Nccl, broadcast_f32, Op::kBroadcast)->RangeMultiplier(16)->Range(8, 1 << 28)->UseRealTime();
BENCHMARK_CAPTURE(BM_Nccl, all_gather_f32, Op::kAllGather)->RangeMultiplier(16)->Range(8, 1 << 28)->UseRealTime();

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  if (lockstep::cuda::DeviceCount() == 0) {
    std::printf("nccl_benchmark: no CUDA device visible; nothing to measure\n");
    return 0;
  }
  if (lockstep::SystemNcclRuntime()->Version() == 0) {
    std::printf("nccl_benchmark: this build has no NCCL; nothing to measure\n");
    return 0;
  }
  std::printf("nccl_benchmark: NCCL %s\n",
              lockstep::NcclVersionString(lockstep::SystemNcclRuntime()->Version()).c_str());
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
