// NcclBackend on real GPUs (tag gpu; skips without a device). One GPU:
// a world of one runs every op, dtype and reduce op through NCCL and must
// give back its input bit for bit; send/recv go to the rank itself; two
// ranks on the one GPU must fail with a clear error. Two or more GPUs: two
// ranks as threads, each on its own GPU.
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/nccl/nccl_communicator.h"
#include "collectives/store/hash_store.h"
#include "core/cuda/cuda_runtime.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/kernels.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

NcclCommunicatorOptions Options() {
  NcclCommunicatorOptions options;
  options.communicator.timeout = Milliseconds(60000);
  options.communicator.debug_checks = true;  // Exercises AllGatherBytes.
  options.init_timeout = Milliseconds(60000);
  return options;
}

// n elements of `dtype` with small exact values (1..7; bool: 0 or 1), on
// `device`.
Tensor Values(int64_t n, DType dtype, Device device, int salt = 0) {
  Tensor host = *Tensor::Empty({n}, dtype);
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = host.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      const int v = static_cast<int>((i + salt) % 7 + 1);
      if constexpr (std::is_same_v<T, Half>) {
        p[i] = FloatToHalf(static_cast<float>(v));
      } else if constexpr (std::is_same_v<T, BFloat16>) {
        p[i] = FloatToBFloat16(static_cast<float>(v));
      } else if constexpr (std::is_same_v<T, bool>) {
        p[i] = v % 2 == 1;
      } else {
        p[i] = static_cast<T>(v);
      }
    }
  });
  return *host.To(device);
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  Tensor ha = *a.To(Device::Cpu());
  Tensor hb = *b.To(Device::Cpu());
  return ha.nbytes() == hb.nbytes() && std::memcmp(ha.raw_data(), hb.raw_data(), ha.nbytes()) == 0;
}

class NcclOneGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
    if (SystemNcclRuntime()->Version() == 0) GTEST_SKIP() << "this build has no NCCL";
    auto comm = CreateNcclCommunicator(std::make_shared<HashStore>(), 0, 1, Device::Cuda(0), Options());
    ASSERT_TRUE(comm.ok()) << comm.status();
    comm_ = *std::move(comm);
  }
  std::unique_ptr<Communicator> comm_;
};

TEST_F(NcclOneGpuTest, EveryOpDtypeAndReduceOpGivesBackItsInput) {
  const Device gpu = Device::Cuda(0);
  std::printf("backend: %s\n", comm_->capabilities().name.c_str());
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{(1 << 20) + 3}}) {
    for (DType dtype : kAllDTypes) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " x " + std::to_string(n));
      const Tensor expected = Values(n, dtype, gpu);
      for (ReduceOp op : kAllReduceOps) {
        if (IsBitwise(op) || (op == ReduceOp::kAvg && dtype == DType::kBool)) continue;  // Refused on NCCL.
        SCOPED_TRACE(std::string(ReduceOpName(op)));
        Tensor t = Values(n, dtype, gpu);
        ASSERT_TRUE(comm_->AllReduce(t, op)->Wait().ok());
        EXPECT_TRUE(SameBytes(t, expected));
        Tensor out = *Tensor::Zeros({n}, dtype, gpu);
        ASSERT_TRUE(comm_->AllReduce(expected, out, op)->Wait().ok());
        EXPECT_TRUE(SameBytes(out, expected));
        out = *Tensor::Zeros({n}, dtype, gpu);
        ASSERT_TRUE(comm_->Reduce(expected, out, op, 0)->Wait().ok());
        EXPECT_TRUE(SameBytes(out, expected));
        out = *Tensor::Zeros({n}, dtype, gpu);
        ASSERT_TRUE(comm_->ReduceScatter(expected, out, op)->Wait().ok());
        EXPECT_TRUE(SameBytes(out, expected));
      }
      Tensor t = Values(n, dtype, gpu);
      ASSERT_TRUE(comm_->Broadcast(t, 0)->Wait().ok());
      EXPECT_TRUE(SameBytes(t, expected));
      for (int kind = 0; kind < 3; ++kind) {
        Tensor out = *Tensor::Zeros({n}, dtype, gpu);
        absl::Status s = kind == 0   ? comm_->AllGather(expected, out)->Wait()
                         : kind == 1 ? comm_->Gather(expected, out, 0)->Wait()
                                     : comm_->Scatter(expected, out, 0)->Wait();
        ASSERT_TRUE(s.ok()) << s;
        EXPECT_TRUE(SameBytes(out, expected)) << "op " << kind;
      }
    }
  }
  ASSERT_TRUE(comm_->Barrier()->Wait().ok());
  EXPECT_TRUE(comm_->broken_status().ok());
}

// The uneven and all-to-all collectives and a split, on CUDA tensors: a
// world of one gives back its input.
TEST_F(NcclOneGpuTest, UnevenAllToAllCoalescedAndSplitGiveBackTheirInput) {
  const Device gpu = Device::Cuda(0);
  for (int64_t n : {int64_t{0}, int64_t{7}, int64_t{(1 << 20) + 3}}) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kI8, DType::kBool}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " x " + std::to_string(n));
      const Tensor expected = Values(n, dtype, gpu);
      for (int kind = 0; kind < 5; ++kind) {
        Tensor out = *Tensor::Zeros({n}, dtype, gpu);
        const std::vector<int64_t> counts = {n};
        absl::Status s = kind == 0   ? comm_->AllGatherV(expected, out, counts)->Wait()
                         : kind == 1 ? comm_->GatherV(expected, out, counts, 0)->Wait()
                         : kind == 2 ? comm_->ScatterV(expected, out, counts, 0)->Wait()
                         : kind == 3 ? comm_->AllToAll(expected, out)->Wait()
                                     : comm_->ReduceScatterV(expected, out, counts, ReduceOp::kMax)->Wait();
        ASSERT_TRUE(s.ok()) << "op " << kind << ": " << s;
        EXPECT_TRUE(SameBytes(out, expected)) << "op " << kind;
      }
      std::vector<Tensor> list = {Values(n, dtype, gpu), Values(3, dtype, gpu, 1)};
      ASSERT_TRUE(comm_->AllReduceCoalesced(list, ReduceOp::kMax)->Wait().ok());
      EXPECT_TRUE(SameBytes(list[0], expected));
      EXPECT_TRUE(SameBytes(list[1], Values(3, dtype, gpu, 1)));
    }
  }
  absl::StatusOr<std::unique_ptr<Communicator>> sub = comm_->Split(0, 0);
  ASSERT_TRUE(sub.ok()) << sub.status();
  std::printf("subgroup backend: %s\n", (*sub)->capabilities().name.c_str());
  Tensor t = Values(1000, DType::kF32, gpu);
  ASSERT_TRUE((*sub)->AllReduce(t, ReduceOp::kSum)->Wait().ok());
  EXPECT_TRUE(SameBytes(t, Values(1000, DType::kF32, gpu)));
  EXPECT_TRUE(comm_->broken_status().ok());
}

TEST_F(NcclOneGpuTest, SynchronizeStreamOrdersTheDefaultStreamAfterTheOperation) {
  // 64 MiB: long enough on the device that a copy not ordered after the
  // all-reduce would read the zeros.
  const int64_t n = int64_t{16} << 20;
  const Device gpu = Device::Cuda(0);
  const Tensor expected = Values(n, DType::kF32, gpu);
  for (int round = 0; round < 3; ++round) {
    Tensor out = *Tensor::Zeros({n}, DType::kF32, gpu);
    std::shared_ptr<Work> work = comm_->AllReduce(expected, out, ReduceOp::kSum);
    ASSERT_TRUE(work->SynchronizeStream(nullptr).ok());
    // To(Cpu) copies on the legacy default stream: it must see the result.
    EXPECT_TRUE(SameBytes(out, expected)) << "round " << round;
    ASSERT_TRUE(work->Wait().ok());
  }
}

TEST(NcclBackendGpuTest, SendAndRecvToItselfInOneGroup) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  std::unique_ptr<NcclRuntime> runtime = SystemNcclRuntime();
  HashStore store;
  auto backend = CreateNcclBackend(*runtime, store, 0, 1, Device::Cuda(0), Options());
  ASSERT_TRUE(backend.ok()) << backend.status();
  struct Source : PointToPointSource {
    std::vector<PointToPointOp> ops;
    void Take(std::vector<PointToPointOp>* out) override {
      for (auto& op : ops) out->push_back(std::move(op));
      ops.clear();
    }
    int wake_fd() const override { return -1; }
  } source;
  const Tensor sent = Values(1000, DType::kBF16, Device::Cuda(0));
  Tensor got = *Tensor::Zeros({1000}, DType::kBF16, Device::Cuda(0));
  int done = 0;
  source.ops.resize(2);
  source.ops[0].send = true;
  source.ops[0].peer = 0;
  source.ops[0].tensor = sent;
  source.ops[0].done = [&](int) { ++done; };
  source.ops[1].send = false;
  source.ops[1].peer = 0;
  source.ops[1].tensor = got;
  source.ops[1].done = [&](int) { ++done; };
  ASSERT_TRUE((*backend)->RunPointToPoint(source, DeadlineIn(Milliseconds(60000))).ok());
  EXPECT_EQ(done, 2);
  EXPECT_TRUE(SameBytes(got, sent));
}

TEST(NcclBackendGpuTest, TwoRanksOnOneGpuFailClearly) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  auto store = std::make_shared<HashStore>();
  std::vector<absl::Status> results(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      NcclCommunicatorOptions options = Options();
      options.init_timeout = Milliseconds(30000);
      results[r] = CreateNcclCommunicator(store, r, 2, Device::Cuda(0), options).status();
    });
  }
  for (auto& t : ranks) t.join();
  for (const absl::Status& s : results) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("one rank per GPU"));
    EXPECT_THAT(std::string(s.message()), HasSubstr("LOCKSTEP_BACKEND=host"));
  }
}

TEST(NcclBackendGpuTest, TwoRanksOnTwoGpus) {
  if (cuda::DeviceCount() < 2) GTEST_SKIP() << "needs 2 CUDA devices, " << cuda::DeviceCount() << " visible";
  auto store = std::make_shared<HashStore>();
  std::vector<absl::Status> results(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r]() {
      results[r] = [&]() -> absl::Status {
        const Device gpu = Device::Cuda(r);
        auto comm = CreateNcclCommunicator(store, r, 2, gpu, Options());
        if (!comm.ok()) return comm.status();
        Tensor t = Values(1001, DType::kF32, gpu, r);
        if (auto s = (*comm)->AllReduce(t, ReduceOp::kSum)->Wait(); !s.ok()) return s;
        const Tensor a = Values(1001, DType::kF32, Device::Cpu(), 0);
        const Tensor b = Values(1001, DType::kF32, Device::Cpu(), 1);
        const std::vector<float> got = *t.ToVector<float>();
        for (int64_t i = 0; i < 1001; ++i) {
          if (got[i] != a.data<float>()[i] + b.data<float>()[i]) return absl::InternalError("wrong all-reduce sum");
        }
        Tensor msg = Values(77, DType::kF16, gpu, r);
        if (auto s = r == 0 ? (*comm)->Send(msg, 1)->Wait() : (*comm)->Recv(msg, 0)->Wait(); !s.ok()) return s;
        if (r == 1 && !SameBytes(msg, Values(77, DType::kF16, Device::Cpu(), 0))) {
          return absl::InternalError("wrong message");
        }
        return (*comm)->Barrier()->Wait();
      }();
    });
  }
  for (auto& t : ranks) t.join();
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace lockstep
