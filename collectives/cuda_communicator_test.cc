// Collectives on CUDA tensors (staged through pinned host memory over the TCP
// transport), two ranks as threads sharing one GPU. Skips without a device.
#include <vector>

#include "collectives/communicator.h"
#include "collectives/testing/group.h"
#include "core/cuda_runtime.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(CudaCommunicatorTest, AllReduceBroadcastAllGatherOnCudaTensors) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  const auto results = testing::RunThreads(2, [](Communicator& comm) -> absl::Status {
    const int r = comm.rank();
    const int64_t n = (1 << 20) + 3;
    std::vector<float> values(n);
    for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>((i + r) % 5);
    absl::StatusOr<Tensor> gpu = Tensor::FromVector<float>(values)->To(Device::Cuda(0));
    if (!gpu.ok()) return gpu.status();
    if (auto s = comm.AllReduce(*gpu, ReduceOp::kSum)->Wait(); !s.ok()) return s;
    const std::vector<float> sum = *gpu->ToVector<float>();
    for (int64_t i = 0; i < n; ++i) {
      if (sum[i] != static_cast<float>(i % 5 + (i + 1) % 5)) return absl::InternalError("wrong all-reduce result");
    }
    Tensor gathered = *Tensor::Zeros({2 * n}, DType::kF32, Device::Cuda(0));
    Tensor mine = *Tensor::FromVector<float>(values)->To(Device::Cuda(0));
    if (auto s = comm.AllGather(mine, gathered)->Wait(); !s.ok()) return s;
    const std::vector<float> all = *gathered.ToVector<float>();
    for (int64_t i = 0; i < n; ++i) {
      if (all[i] != static_cast<float>(i % 5) || all[n + i] != static_cast<float>((i + 1) % 5)) {
        return absl::InternalError("wrong all-gather result");
      }
    }
    if (auto s = comm.Broadcast(mine, 1)->Wait(); !s.ok()) return s;
    if ((*mine.ToVector<float>())[0] != 1.0f) return absl::InternalError("wrong broadcast result");
    return absl::OkStatus();
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace lockstep
