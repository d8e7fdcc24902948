// Collectives on CUDA tensors (staged through pinned host memory over the TCP
// transport), two ranks as threads sharing one GPU. Skips without a device.
#include <cstdint>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/testing/group.h"
#include "core/cuda/cuda_runtime.h"
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

// The uneven and all-to-all operations stage CUDA tensors the same way
// (HostBackend::Stage): 3 ranks, blocks of different sizes, one empty.
TEST(CudaCommunicatorTest, UnevenAndAllToAllOnCudaTensors) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  const auto results = testing::RunThreads(3, [](Communicator& comm) -> absl::Status {
    const int r = comm.rank();
    const std::vector<int64_t> counts = {5, 0, 70001};
    const int64_t total = 5 + 0 + 70001;
    auto cuda = [](const std::vector<int32_t>& v) { return *Tensor::FromVector<int32_t>(v)->To(Device::Cuda(0)); };
    // AllGatherV: block q holds 1000 * q + i.
    std::vector<int32_t> mine(counts[r]);
    for (int64_t i = 0; i < counts[r]; ++i) mine[i] = static_cast<int32_t>(1000 * r + i);
    Tensor all = *Tensor::Zeros({total}, DType::kI32, Device::Cuda(0));
    if (auto s = comm.AllGatherV(cuda(mine), all, counts)->Wait(); !s.ok()) return s;
    const std::vector<int32_t> gathered = *all.ToVector<int32_t>();
    for (int q = 0, at = 0; q < 3; ++q) {
      for (int64_t i = 0; i < counts[q]; ++i, ++at) {
        if (gathered[at] != 1000 * q + i) return absl::InternalError("wrong AllGatherV result");
      }
    }
    // ReduceScatterV (SUM): every rank contributes (rank + 1) * element index.
    std::vector<int32_t> contribution(total);
    for (int64_t i = 0; i < total; ++i) contribution[i] = static_cast<int32_t>((r + 1) * (i % 97));
    Tensor block = *Tensor::Zeros({counts[r]}, DType::kI32, Device::Cuda(0));
    if (auto s = comm.ReduceScatterV(cuda(contribution), block, counts, ReduceOp::kSum)->Wait(); !s.ok()) return s;
    const std::vector<int32_t> reduced = *block.ToVector<int32_t>();
    int64_t offset = 0;
    for (int q = 0; q < r; ++q) offset += counts[q];
    for (int64_t i = 0; i < counts[r]; ++i) {
      if (reduced[i] != 6 * ((offset + i) % 97)) return absl::InternalError("wrong ReduceScatterV result");
    }
    // AllToAllV: rank r sends (r + 1) * (j + 1) elements to rank j, valued 100 * r + j.
    std::vector<int64_t> send(3), recv(3);
    for (int j = 0; j < 3; ++j) {
      send[j] = (r + 1) * (j + 1) * 1000;
      recv[j] = (j + 1) * (r + 1) * 1000;
    }
    std::vector<int32_t> out_values;
    for (int j = 0; j < 3; ++j) out_values.insert(out_values.end(), send[j], 100 * r + j);
    int64_t recv_total = 0;
    for (int64_t c : recv) recv_total += c;
    Tensor received = *Tensor::Zeros({recv_total}, DType::kI32, Device::Cuda(0));
    if (auto s = comm.AllToAllV(cuda(out_values), received, send, recv)->Wait(); !s.ok()) return s;
    const std::vector<int32_t> got = *received.ToVector<int32_t>();
    for (int i = 0, at = 0; i < 3; ++i) {
      for (int64_t k = 0; k < recv[i]; ++k, ++at) {
        if (got[at] != 100 * i + r) return absl::InternalError("wrong AllToAllV result");
      }
    }
    return absl::OkStatus();
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace lockstep
