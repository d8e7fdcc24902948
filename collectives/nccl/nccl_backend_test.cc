// NcclBackend and CreateNcclBackend over the fake NCCL (no GPU): op mapping,
// AVG by version and dtype, grouped scatter/gather and point to point, the
// watchdog's abort with the op's fingerprint, the unique-id exchange and the
// version checks.
#include "collectives/nccl/nccl_backend.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/nccl/nccl_communicator.h"
#include "collectives/nccl/nccl_fake.h"
#include "collectives/store/hash_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

OpContext Op(uint64_t seq, Milliseconds timeout = Milliseconds(20000)) {
  OpContext ctx;
  ctx.seq = seq;
  ctx.deadline = DeadlineIn(timeout);
  return ctx;
}

// The fake's "device memory" is host memory: with cpu_tensors off the
// backend uses the test's CPU tensors in place, as it would CUDA tensors.
std::unique_ptr<NcclBackend> MakeBackend(std::shared_ptr<FakeNcclState> state, int rank = 0, int size = 1,
                                         bool cpu_tensors = false) {
  NcclBackendOptions options;
  options.cpu_tensors = cpu_tensors;
  options.watchdog_interval = Milliseconds(2);
  auto backend =
      NcclBackend::Create(std::make_unique<FakeNcclComm>(state), rank, size, Device::Cuda(0), state->version, options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return *std::move(backend);
}

TEST(NcclVersionTest, CodesAndStrings) {
  EXPECT_EQ(NcclVersionCode(2, 28, 9), 22809);
  EXPECT_EQ(NcclVersionCode(2, 8, 4), 2804);
  EXPECT_EQ(NcclVersionString(22809), "2.28.9");
  EXPECT_EQ(NcclVersionString(2804), "2.8.4");
  EXPECT_EQ(NcclVersionString(0), "none");
  EXPECT_LT(NcclVersionCode(2, 8, 4), kNcclAvgVersion);
  EXPECT_LT(kNcclAvgVersion, kNcclNonBlockingInitVersion);
}

TEST(NcclBackendTest, AllReduceAvgUsesNcclAvgOnlyForFloatsFrom2_10) {
  auto state = std::make_shared<FakeNcclState>();
  auto backend = MakeBackend(state, /*rank=*/0, /*size=*/2);
  Tensor f = *Tensor::FromVector<float>({1, 2, 3, 4});
  Tensor i = *Tensor::FromVector<int32_t>({1, 2, 3, 4});
  ASSERT_TRUE(backend->AllReduce(f, f, ReduceOp::kAvg, Op(1)).ok());
  ASSERT_TRUE(backend->AllReduce(i, i, ReduceOp::kAvg, Op(2)).ok());
  EXPECT_THAT(state->Calls(), ElementsAre("WaitFor", "AllReduce AVG f32 4", "Record",  //
                                          "WaitFor", "AllReduce SUM i32 4", "Divide i32 4 by 2", "Record"));
  EXPECT_TRUE(backend->UsesNcclAvg(DType::kBF16));
  EXPECT_FALSE(backend->UsesNcclAvg(DType::kI64));
}

// NCCL before 2.29.7 leaves a tail unwritten in one-rank ncclAvg (its
// issue 1950, seen on an H200 with 2.28.3): a world of one sends SUM, which
// is the same input-for-output identity.
TEST(NcclBackendTest, AWorldOfOneSendsAvgAsSum) {
  auto state = std::make_shared<FakeNcclState>();
  auto backend = MakeBackend(state);
  Tensor in = *Tensor::FromVector<float>({1, 2, 3});
  Tensor out = *Tensor::Zeros({3}, DType::kF32);
  ASSERT_TRUE(backend->AllReduce(in, out, ReduceOp::kAvg, Op(1)).ok());
  ASSERT_TRUE(backend->Reduce(in, out, ReduceOp::kAvg, 0, Op(2)).ok());
  ASSERT_TRUE(backend->ReduceScatter(in, out, ReduceOp::kAvg, Op(3)).ok());
  for (const std::string& call : state->Calls()) EXPECT_THAT(call, ::testing::Not(HasSubstr("AVG"))) << call;
  EXPECT_EQ(*out.ToVector<float>(), (std::vector<float>{1, 2, 3}));
}

TEST(NcclBackendTest, AvgBeforeNccl2_10IsSumThenDivide) {
  auto state = std::make_shared<FakeNcclState>();
  state->version = NcclVersionCode(2, 9, 9);
  auto backend = MakeBackend(state);
  Tensor in = *Tensor::FromVector<float>({1, 2});
  Tensor out = *Tensor::Zeros({2}, DType::kF32);
  ASSERT_TRUE(backend->AllReduce(in, out, ReduceOp::kAvg, Op(1)).ok());
  EXPECT_THAT(state->Calls(), ElementsAre("WaitFor", "AllReduce SUM f32 2", "Divide f32 2 by 1", "Record"));
  EXPECT_EQ(*out.ToVector<float>(), (std::vector<float>{1, 2}));
  EXPECT_FALSE(backend->UsesNcclAvg(DType::kF32));
}

TEST(NcclBackendTest, EveryCollectiveMapsToItsNcclCall) {
  auto state = std::make_shared<FakeNcclState>();
  auto backend = MakeBackend(state);
  Tensor a = *Tensor::FromVector<float>({1, 2, 3});
  Tensor b = *Tensor::Zeros({3}, DType::kF32);
  ASSERT_TRUE(backend->Broadcast(a, 0, Op(1)).ok());
  ASSERT_TRUE(backend->Reduce(a, b, ReduceOp::kMax, 0, Op(2)).ok());
  ASSERT_TRUE(backend->AllGather(a, b, Op(3)).ok());
  ASSERT_TRUE(backend->ReduceScatter(a, b, ReduceOp::kProd, Op(4)).ok());
  ASSERT_TRUE(backend->Barrier(Op(5)).ok());
  EXPECT_EQ(*b.ToVector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_THAT(state->Calls(),
              ElementsAre("WaitFor", "Broadcast f32 3 from 0", "Record", "WaitFor", "Reduce MAX f32 3 to 0", "Record",
                          "WaitFor", "AllGather f32 3", "Record", "WaitFor", "ReduceScatter PROD f32 3", "Record",
                          "WaitFor", "AllReduce MAX u8 1", "Record"));
  // Fingerprints go through device memory and back.
  const char mine[3] = {'a', 'b', 'c'};
  char all[3] = {};
  ASSERT_TRUE(backend->AllGatherBytes(mine, 3, all, Op(6)).ok());
  EXPECT_EQ(std::string(all, 3), "abc");
}

TEST(NcclBackendTest, GatherAndScatterAreGroupedSendRecv) {
  auto root_state = std::make_shared<FakeNcclState>();
  auto root = MakeBackend(root_state, /*rank=*/1, /*size=*/3);
  Tensor block = *Tensor::FromVector<float>({7, 8});
  Tensor all = *Tensor::Zeros({6}, DType::kF32);
  ASSERT_TRUE(root->Gather(block, all, /*root=*/1, Op(1)).ok());
  EXPECT_EQ(*all.ToVector<float>(), (std::vector<float>{0, 0, 7, 8, 0, 0}));
  ASSERT_TRUE(root->Scatter(all, block, /*root=*/1, Op(2)).ok());
  EXPECT_THAT(
      root_state->Calls(),
      ElementsAre("WaitFor", "Copy 8", "GroupStart", "Recv f32 2 from 0", "Recv f32 2 from 2", "GroupEnd", "Record",
                  "WaitFor", "Copy 8", "GroupStart", "Send f32 2 to 0", "Send f32 2 to 2", "GroupEnd", "Record"));

  auto leaf_state = std::make_shared<FakeNcclState>();
  auto leaf = MakeBackend(leaf_state, /*rank=*/2, /*size=*/3);
  ASSERT_TRUE(leaf->Gather(block, Tensor(), /*root=*/0, Op(1)).ok());
  ASSERT_TRUE(leaf->Scatter(Tensor(), block, /*root=*/0, Op(2)).ok());
  EXPECT_THAT(leaf_state->Calls(), ElementsAre("WaitFor", "GroupStart", "Send f32 2 to 0", "GroupEnd", "Record",
                                               "WaitFor", "GroupStart", "Recv f32 2 from 0", "GroupEnd", "Record"));
}

class OneBatch : public PointToPointSource {
 public:
  explicit OneBatch(std::vector<PointToPointOp> ops) : ops_(std::move(ops)) {}
  void Take(std::vector<PointToPointOp>* ops) override {
    for (auto& op : ops_) ops->push_back(std::move(op));
    ops_.clear();
  }
  int wake_fd() const override { return -1; }

 private:
  std::vector<PointToPointOp> ops_;
};

TEST(NcclBackendTest, PointToPointBatchIsOneGroupAndCompletesEachOp) {
  auto state = std::make_shared<FakeNcclState>();
  auto backend = MakeBackend(state, 0, 2);
  int done = 0;
  std::vector<PointToPointOp> ops(2);
  ops[0].send = true;
  ops[0].peer = 1;
  ops[0].tensor = *Tensor::FromVector<float>({1, 2, 3});
  ops[0].done = [&](int) { ++done; };
  ops[1].send = false;
  ops[1].peer = 1;
  ops[1].tensor = *Tensor::Zeros({5}, DType::kF16);
  ops[1].done = [&](int) { ++done; };
  OneBatch source(std::move(ops));
  ASSERT_TRUE(backend->RunPointToPoint(source, DeadlineIn(Milliseconds(20000))).ok());
  EXPECT_EQ(done, 2);
  EXPECT_THAT(state->Calls(),
              ElementsAre("WaitFor", "GroupStart", "Send f32 3 to 1", "Recv f16 5 from 1", "GroupEnd", "Record"));
}

TEST(NcclBackendTest, WatchdogAbortsAHungOperationAndFailsItWithItsFingerprint) {
  auto state = std::make_shared<FakeNcclState>();
  state->hang = true;
  auto backend = MakeBackend(state);
  Tensor t = *Tensor::FromVector<float>({1, 2, 3, 4});
  const absl::Status s = backend->AllReduce(t, t, ReduceOp::kSum, Op(7, Milliseconds(20)));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("AllReduce seq 7 (f32, 4 elements, SUM)"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank 0 on cuda:0"));
  EXPECT_EQ(state->aborts.load(), 1);
  // Everything later fails with the same cause, without calling NCCL.
  const size_t calls = state->Calls().size();
  const absl::Status later = backend->Broadcast(t, 0, Op(8));
  EXPECT_EQ(later.code(), s.code());
  EXPECT_THAT(std::string(later.message()), HasSubstr("Broadcast seq 8"));
  EXPECT_THAT(std::string(later.message()), HasSubstr(std::string(s.message())));
  EXPECT_EQ(state->Calls().size(), calls);
  backend->Abort("communicator broke");
  EXPECT_EQ(state->aborts.load(), 1);
}

TEST(NcclBackendTest, AsyncErrorFailsTheRunningOperation) {
  auto state = std::make_shared<FakeNcclState>();
  state->hang = true;
  state->SetAsyncError(absl::UnavailableError("NCCL remote error: peer rank 1 exited"));
  auto backend = MakeBackend(state);
  Tensor t = *Tensor::FromVector<float>({1});
  const absl::Status s = backend->Broadcast(t, 0, Op(3));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("peer rank 1 exited"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("Broadcast seq 3"));
  EXPECT_EQ(state->aborts.load(), 1);
}

TEST(NcclBackendTest, FailedNcclCallFailsTheOpWithItsFingerprintAndAborts) {
  auto state = std::make_shared<FakeNcclState>();
  state->fail_call = "GroupEnd";
  auto backend = MakeBackend(state, /*rank=*/1, /*size=*/2);
  Tensor t = *Tensor::FromVector<float>({1, 2});
  const absl::Status s = backend->Gather(t, Tensor(), /*root=*/0, Op(4));
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("Gather seq 4 (f32, 2 elements, root 0) on rank 1 (cuda:0)"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("unhandled system error"));
  EXPECT_EQ(state->aborts.load(), 1);
  const absl::Status later = backend->Barrier(Op(5));  // Broken for good.
  EXPECT_EQ(later.code(), s.code());
  EXPECT_THAT(std::string(later.message()), HasSubstr("Barrier seq 5"));
}

TEST(NcclBackendTest, CreateChecksDeviceAndVersion) {
  auto state = std::make_shared<FakeNcclState>();
  auto cpu = NcclBackend::Create(std::make_unique<FakeNcclComm>(state), 0, 1, Device::Cpu(), 22809);
  EXPECT_EQ(cpu.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(cpu.status().message()), HasSubstr("LOCKSTEP_BACKEND=host"));
  auto old = NcclBackend::Create(std::make_unique<FakeNcclComm>(state), 0, 1, Device::Cuda(0), 2604);
  EXPECT_EQ(old.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(old.status().message()), HasSubstr("2.6.4"));
  auto backend = MakeBackend(state);
  EXPECT_TRUE(backend->capabilities().cuda_tensors);
  EXPECT_FALSE(backend->capabilities().cpu_tensors);
  EXPECT_TRUE(backend->capabilities().point_to_point);
  EXPECT_EQ(backend->capabilities().name, "nccl 2.28.9 on cuda:0");
}

// Two ranks as threads meet through a store; both join with rank 0's id.
std::vector<absl::Status> CreateTwo(std::shared_ptr<FakeNcclState> state, NcclCommunicatorOptions options,
                                    Store* shared_store = nullptr) {
  HashStore own_store;
  Store& store = shared_store != nullptr ? *shared_store : own_store;
  std::vector<absl::Status> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      FakeNcclRuntime runtime(state);
      results[r] = CreateNcclBackend(runtime, store, r, 2, Device::Cuda(r % state->device_count), options).status();
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

TEST(CreateNcclBackendTest, SharesRankZerosUniqueIdAndInitsWithoutBlockingFrom2_14) {
  auto state = std::make_shared<FakeNcclState>();
  state->device_count = 2;
  for (const absl::Status& s : CreateTwo(state, {})) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(state->unique_ids.load(), 1);
  std::vector<std::string> inits = state->Inits();
  std::sort(inits.begin(), inits.end());
  EXPECT_THAT(inits, ElementsAre("rank 0 of 2 on 0 non-blocking id A", "rank 1 of 2 on 1 non-blocking id A"));

  auto old = std::make_shared<FakeNcclState>();
  old->device_count = 2;
  old->version = NcclVersionCode(2, 13, 4);
  for (const absl::Status& s : CreateTwo(old, {})) EXPECT_TRUE(s.ok()) << s;
  for (const std::string& init : old->Inits()) EXPECT_THAT(init, HasSubstr(" blocking"));
}

TEST(CreateNcclBackendTest, AGroupMadeAgainOnTheSameStoreNeverJoinsAStaleId) {
  auto state = std::make_shared<FakeNcclState>();
  state->device_count = 2;
  HashStore store;  // Outlives the first group, as a launcher's store does.
  for (const absl::Status& s : CreateTwo(state, {}, &store)) EXPECT_TRUE(s.ok()) << s;
  // The restarted group: rank 1 alone first. Attempt 1's id is still in the
  // store; rank 1 must wait for the new one, not join the old.
  NcclCommunicatorOptions options;
  options.init_timeout = Milliseconds(50);
  FakeNcclRuntime runtime(state);
  absl::Status early = CreateNcclBackend(runtime, store, 1, 2, Device::Cuda(1), options).status();
  EXPECT_EQ(early.code(), absl::StatusCode::kDeadlineExceeded) << early;
  EXPECT_THAT(std::string(early.message()), HasSubstr("nccl_unique_id/2"));
  EXPECT_EQ(state->Inits().size(), 2u);  // Only the first group's.

  // Rank 1 counted its failed attempt: a fresh store for the next try, as
  // a launcher gives each attempt, makes both ranks agree again.
  HashStore next;
  for (const absl::Status& s : CreateTwo(state, {}, &next)) EXPECT_TRUE(s.ok()) << s;
  std::vector<std::string> inits = state->Inits();
  ASSERT_EQ(inits.size(), 4u);
  std::sort(inits.begin() + 2, inits.end());
  EXPECT_THAT(inits[2], HasSubstr("id B"));
  EXPECT_THAT(inits[3], HasSubstr("id B"));

  // Two groups in a row on one store (a second communicator with the same
  // prefix): each joins its own id.
  HashStore again;
  for (const absl::Status& s : CreateTwo(state, {}, &again)) EXPECT_TRUE(s.ok()) << s;
  for (const absl::Status& s : CreateTwo(state, {}, &again)) EXPECT_TRUE(s.ok()) << s;
  inits = state->Inits();
  ASSERT_EQ(inits.size(), 8u);
  std::sort(inits.begin() + 4, inits.begin() + 6);
  std::sort(inits.begin() + 6, inits.end());
  EXPECT_THAT(inits[4], HasSubstr("id C"));
  EXPECT_THAT(inits[5], HasSubstr("id C"));
  EXPECT_THAT(inits[6], HasSubstr("id D"));
  EXPECT_THAT(inits[7], HasSubstr("id D"));
}

TEST(CreateNcclBackendTest, ErrorsSayWhatToDo) {
  HashStore store;
  NcclCommunicatorOptions options;
  options.init_timeout = Milliseconds(30);

  auto none = std::make_shared<FakeNcclState>();
  none->version = 0;
  FakeNcclRuntime no_nccl(none);
  absl::Status s = CreateNcclBackend(no_nccl, store, 0, 1, Device::Cuda(0), options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("no NCCL"));

  auto state = std::make_shared<FakeNcclState>();
  FakeNcclRuntime runtime(state);
  s = CreateNcclBackend(runtime, store, 0, 1, Device::Cuda(1), options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("cuda:1 is not one of the 1 visible"));

  // Rank 0 never comes.
  s = CreateNcclBackend(runtime, store, 1, 2, Device::Cuda(0), options).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank 0 did not publish its GPU"));

  // What NCCL says about two ranks on one GPU reaches the caller with the rank.
  state->init_error = absl::InternalError("ncclCommInitRankConfig: invalid usage (Duplicate GPU detected)");
  s = CreateNcclBackend(runtime, store, 0, 1, Device::Cuda(0), options).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("init of rank 0 of 1 on cuda:0 failed"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("Duplicate GPU"));

  HashStore bad;
  ASSERT_TRUE(bad.Set("nccl_unique_id/1", "short").ok());
  ASSERT_TRUE(bad.Set("nccl_device/0", "otherhost/gpu0").ok());
  s = CreateNcclBackend(runtime, bad, 1, 2, Device::Cuda(0), options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
}

TEST(CreateNcclBackendTest, TwoRanksOnOneGpuFailBeforeNcclInitSayingWhatToDo) {
  auto state = std::make_shared<FakeNcclState>();  // One GPU: both ranks on cuda:0.
  for (const absl::Status& s : CreateTwo(state, {})) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("ranks 0 and 1 both use GPU fakehost/gpu0"));
    EXPECT_THAT(std::string(s.message()), HasSubstr("LOCKSTEP_BACKEND=host"));
  }
  EXPECT_TRUE(state->Inits().empty());
}

TEST(NcclCommunicatorTest, CpuTensorsAreStagedThroughDeviceMemory) {
  auto state = std::make_shared<FakeNcclState>();
  auto comm = Communicator::Create(MakeBackend(state, 0, 1, /*cpu_tensors=*/true), CommunicatorOptions{});
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_TRUE((*comm)->capabilities().cpu_tensors);
  Tensor t = *Tensor::FromVector<float>({1.5f, 2.5f});
  ASSERT_TRUE((*comm)->AllReduce(t, ReduceOp::kSum)->Wait().ok());
  EXPECT_EQ(*t.ToVector<float>(), (std::vector<float>{1.5f, 2.5f}));
  Tensor in = *Tensor::FromVector<int64_t>({4, 5, 6});
  Tensor out = *Tensor::Zeros({3}, DType::kI64);
  ASSERT_TRUE((*comm)->AllGather(in, out)->Wait().ok());
  EXPECT_EQ(*out.ToVector<int64_t>(), (std::vector<int64_t>{4, 5, 6}));
  // In place: one staged buffer, copied in and out; out of place: in, then out.
  EXPECT_THAT(state->Calls(), ElementsAre("WaitFor", "Copy 8", "AllReduce SUM f32 2", "Copy 8", "Record",  //
                                          "WaitFor", "Copy 24", "AllGather i64 3", "Copy 24", "Record"));
}

TEST(NcclBackendTest, DeviceOnlyOperationReturnsOnceQueuedWithItsEventAndHowToAwaitIt) {
  auto state = std::make_shared<FakeNcclState>();
  state->hang = true;  // The event does not fire until the test says so.
  auto backend = MakeBackend(state);
  Tensor t = *Tensor::FromVector<float>({1, 2, 3});
  std::shared_ptr<StreamMarker> marker;
  std::function<absl::Status()> finish;
  OpContext ctx = Op(1);
  ctx.queued = [&](std::shared_ptr<StreamMarker> m, std::function<absl::Status()> f) {
    marker = std::move(m);
    finish = std::move(f);
  };
  // Returns although the device has not finished.
  ASSERT_TRUE(backend->AllReduce(t, t, ReduceOp::kSum, ctx).ok());
  ASSERT_NE(marker, nullptr);
  ASSERT_TRUE(finish);
  // While the operation still runs, a caller's stream can be ordered after it.
  ASSERT_TRUE(marker->MakeStreamWait(reinterpret_cast<void*>(16)).ok());
  state->hang = false;
  EXPECT_TRUE(finish().ok());
  EXPECT_THAT(state->Calls(), ElementsAre("WaitFor", "AllReduce SUM f32 3", "Record", "MakeStreamWait 16"));
}

TEST(NcclBackendTest, AQueuedOperationPastItsDeadlineFailsWhenAwaited) {
  auto state = std::make_shared<FakeNcclState>();
  state->hang = true;
  auto backend = MakeBackend(state);
  Tensor t = *Tensor::FromVector<float>({1, 2});
  std::function<absl::Status()> finish;
  OpContext ctx = Op(4, Milliseconds(50));
  ctx.queued = [&](std::shared_ptr<StreamMarker>, std::function<absl::Status()> f) { finish = std::move(f); };
  ASSERT_TRUE(backend->AllReduce(t, t, ReduceOp::kSum, ctx).ok());
  ASSERT_TRUE(finish);
  // The watchdog still watches it: past its deadline the communicator is
  // aborted and awaiting the operation gives the fingerprint.
  const absl::Status s = finish();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("AllReduce seq 4 (f32, 2 elements, SUM)"));
  EXPECT_EQ(state->aborts.load(), 1);
}

TEST(NcclBackendTest, StagedHostTensorsAreNotHandedOutAsDeviceWork) {
  auto state = std::make_shared<FakeNcclState>();
  auto backend = MakeBackend(state, 0, 1, /*cpu_tensors=*/true);
  Tensor t = *Tensor::FromVector<float>({1, 2});
  bool handed = false;
  OpContext ctx = Op(1);
  ctx.queued = [&](std::shared_ptr<StreamMarker>, std::function<absl::Status()>) { handed = true; };
  ASSERT_TRUE(backend->AllReduce(t, t, ReduceOp::kSum, ctx).ok());
  // The result is copied back to the host inside the operation: a stream
  // wait would not cover it, so the Work must be waited on the host.
  EXPECT_FALSE(handed);
}

TEST(NcclCommunicatorTest, SynchronizeStreamOrdersTheCallersStreamWithoutWaitingForTheDevice) {
  auto state = std::make_shared<FakeNcclState>();
  auto comm = Communicator::Create(MakeBackend(state), CommunicatorOptions{});
  ASSERT_TRUE(comm.ok()) << comm.status();
  state->hang = true;
  std::shared_ptr<Work> work = (*comm)->Barrier();
  ASSERT_TRUE(work->SynchronizeStream(reinterpret_cast<void*>(32)).ok());
  EXPECT_FALSE(work->IsCompleted());  // The device has not finished; the host did not wait for it.
  EXPECT_THAT(state->Calls(), ::testing::Contains("MakeStreamWait 32"));
  state->hang = false;
  EXPECT_TRUE(work->Wait().ok());
}

TEST(NcclCommunicatorTest, OperationsAreQueuedOnTheDeviceWhileEarlierOnesRun) {
  auto state = std::make_shared<FakeNcclState>();
  auto comm = Communicator::Create(MakeBackend(state), CommunicatorOptions{});
  ASSERT_TRUE(comm.ok()) << comm.status();
  state->hang = true;  // Nothing finishes on the "device" for now.
  std::shared_ptr<Work> first = (*comm)->Barrier();
  std::shared_ptr<Work> second = (*comm)->Barrier();
  std::shared_ptr<Work> third = (*comm)->Barrier();
  // The third is queued on the device although the first has not finished.
  ASSERT_TRUE(third->SynchronizeStream(nullptr).ok());
  EXPECT_FALSE(first->IsCompleted());
  EXPECT_THAT(state->Calls(), ElementsAre("WaitFor", "AllReduce MAX u8 1", "Record",  //
                                          "WaitFor", "AllReduce MAX u8 1", "Record",  //
                                          "WaitFor", "AllReduce MAX u8 1", "Record", "MakeStreamWait 0"));
  state->hang = false;
  EXPECT_TRUE(first->Wait().ok());
  EXPECT_TRUE(second->Wait().ok());
  EXPECT_TRUE(third->Wait().ok());
}

TEST(NcclCommunicatorTest, OperationsOnTheDeviceTogetherFailTogetherNamingThemselves) {
  auto state = std::make_shared<FakeNcclState>();
  CommunicatorOptions options;
  options.timeout = Milliseconds(100);
  auto comm = Communicator::Create(MakeBackend(state), options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  state->hang = true;  // A peer that never comes: nothing finishes.
  std::shared_ptr<Work> first = (*comm)->Barrier();
  std::shared_ptr<Work> second = (*comm)->Barrier();
  const absl::Status a = first->Wait();
  const absl::Status b = second->Wait();
  EXPECT_FALSE(a.ok());
  EXPECT_FALSE(b.ok());
  EXPECT_THAT(std::string(a.message()), HasSubstr("Barrier seq 0"));
  EXPECT_THAT(std::string(b.message()), HasSubstr("Barrier seq 1"));
  EXPECT_FALSE((*comm)->broken_status().ok());
  EXPECT_EQ(state->aborts.load(), 1);
  // Later operations fail at once.
  EXPECT_FALSE((*comm)->Barrier()->Wait().ok());
}

TEST(NcclCommunicatorTest, SynchronizeStreamWithStagedHostTensorsWaitsForTheResult) {
  auto state = std::make_shared<FakeNcclState>();
  auto comm = Communicator::Create(MakeBackend(state, 0, 1, /*cpu_tensors=*/true), CommunicatorOptions{});
  ASSERT_TRUE(comm.ok()) << comm.status();
  Tensor t = *Tensor::FromVector<float>({1.5f, 2.5f});
  std::shared_ptr<Work> work = (*comm)->AllReduce(t, ReduceOp::kSum);
  ASSERT_TRUE(work->SynchronizeStream(nullptr).ok());
  EXPECT_TRUE(work->IsCompleted());
  EXPECT_EQ(*t.ToVector<float>(), (std::vector<float>{1.5f, 2.5f}));
}

TEST(NcclBackendTest, UnevenAndAllToAllOpsAreGroupedSendRecv) {
  // Rank 1 of 3: blocks of 1, 2 and 3 elements.
  auto state = std::make_shared<FakeNcclState>();
  auto backend = MakeBackend(state, /*rank=*/1, /*size=*/3);
  const std::vector<int64_t> counts = {1, 2, 3};
  Tensor mine = *Tensor::FromVector<float>({5, 6});
  Tensor all = *Tensor::Zeros({6}, DType::kF32);
  ASSERT_TRUE(backend->AllGatherV(mine, all, counts, Op(1)).ok());
  EXPECT_EQ(*all.ToVector<float>(), (std::vector<float>{0, 5, 6, 0, 0, 0}));  // Its own block in place.
  Tensor sums = *Tensor::FromVector<float>({1, 2, 3, 4, 5, 6});
  Tensor block = *Tensor::Zeros({2}, DType::kF32);
  ASSERT_TRUE(backend->ReduceScatterV(sums, block, counts, ReduceOp::kSum, Op(2)).ok());
  ASSERT_TRUE(backend->AllToAll(sums, all, {3, 2, 1}, {1, 2, 3}, Op(3)).ok());
  EXPECT_THAT(state->Calls(), ElementsAre("WaitFor", "Copy 8", "GroupStart", "Send f32 2 to 0", "Recv f32 1 from 0",
                                          "Send f32 2 to 2", "Recv f32 3 from 2", "GroupEnd", "Record",  //
                                          "WaitFor", "GroupStart", "Reduce SUM f32 1 to 0", "Reduce SUM f32 2 to 1",
                                          "Reduce SUM f32 3 to 2", "GroupEnd", "Record",  //
                                          "WaitFor", "Copy 8", "GroupStart", "Send f32 1 to 2", "Recv f32 1 from 0",
                                          "Send f32 3 to 0", "Recv f32 3 from 2", "GroupEnd", "Record"));
}

TEST(NcclBackendTest, BoolReducesAsUint8MaxAndMinAndBitwiseOpsAreRefused) {
  auto state = std::make_shared<FakeNcclState>();
  auto comm = Communicator::Create(MakeBackend(state, 0, 1, /*cpu_tensors=*/true), CommunicatorOptions{});
  ASSERT_TRUE(comm.ok());
  Tensor b = *Tensor::Zeros({4}, DType::kBool);
  ASSERT_TRUE((*comm)->AllReduce(b, ReduceOp::kSum)->Wait().ok());
  ASSERT_TRUE((*comm)->AllReduce(b, ReduceOp::kProd)->Wait().ok());
  Tensor i = *Tensor::Zeros({4}, DType::kI32);
  const absl::Status band = (*comm)->AllReduce(i, ReduceOp::kBand)->Wait();
  EXPECT_THAT(std::string(band.message()), HasSubstr("backend has no BAND reduction"));
  Tensor t = *Tensor::Zeros({1}, DType::kF32);
  const absl::Status any = (*comm)->RecvAnySource(t)->Wait();
  EXPECT_EQ(any.code(), absl::StatusCode::kInvalidArgument);  // Alone: refused before the backend's turn.
  std::vector<std::string> calls = state->Calls();
  EXPECT_NE(std::find(calls.begin(), calls.end(), "AllReduce MAX bool 4"), calls.end());
  EXPECT_NE(std::find(calls.begin(), calls.end(), "AllReduce MIN bool 4"), calls.end());
}

TEST(NcclBackendTest, SplitIsNcclCommSplitFrom2_18) {
  auto state = std::make_shared<FakeNcclState>();
  auto comm = Communicator::Create(MakeBackend(state, 0, 1, /*cpu_tensors=*/true), CommunicatorOptions{});
  ASSERT_TRUE(comm.ok());
  EXPECT_TRUE((*comm)->capabilities().native_split);
  absl::StatusOr<std::unique_ptr<Communicator>> sub = (*comm)->Split(3, 7);
  ASSERT_TRUE(sub.ok()) << sub.status();
  ASSERT_NE(*sub, nullptr);
  EXPECT_EQ((*sub)->size(), 1);
  Tensor t = *Tensor::FromVector<float>({1, 2});
  EXPECT_TRUE((*sub)->AllReduce(t, ReduceOp::kSum)->Wait().ok());
  std::vector<std::string> calls = state->Calls();
  EXPECT_NE(std::find(calls.begin(), calls.end(), "Split color 3 key 7"), calls.end());
  // No color: nullptr, after taking part in the split.
  absl::StatusOr<std::unique_ptr<Communicator>> none = (*comm)->Split(Communicator::kNoColor, 0);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, nullptr);
  calls = state->Calls();
  EXPECT_NE(std::find(calls.begin(), calls.end(), "Split color -1 key 0"), calls.end())
      << ::testing::PrintToString(calls);
}

TEST(NcclBackendTest, BeforeNccl2_18SubgroupsComeFromTheStore) {
  auto state = std::make_shared<FakeNcclState>();
  state->version = NcclVersionCode(2, 17, 1);
  auto comm = Communicator::Create(MakeBackend(state), CommunicatorOptions{});
  ASSERT_TRUE(comm.ok());
  EXPECT_FALSE((*comm)->capabilities().native_split);
  // Made here without CreateNcclCommunicator: no factory, a clear refusal.
  absl::StatusOr<std::unique_ptr<Communicator>> sub = (*comm)->Split(0, 0);
  EXPECT_EQ(sub.status().code(), absl::StatusCode::kFailedPrecondition) << sub.status();
}

}  // namespace
}  // namespace lockstep
