// Every collective x dtype x reduce op x world size 1..5 x count, on real
// TCP connections between threads (and a grid on forked processes), against
// expected values computed independently (collectives/testing/grid_values.h).
// Inputs are small integers, so every result is exact in every dtype and
// compared exactly. The uneven, all-to-all and coalesced collectives have
// their grid in collectives_v_test.cc.
#include "collectives/communicator.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/testing/grid_values.h"
#include "collectives/testing/group.h"
#include "core/dtype.h"
#include "core/half.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using testing::Compare;
using testing::ExpectedReduce;
using testing::Filled;
using testing::FromDouble;
using testing::GridValue;
using testing::RunProcesses;
using testing::RunThreads;

enum class Op { kAllReduce, kAllReduceOutOfPlace, kReduce, kBroadcast, kAllGather, kGather, kScatter, kReduceScatter };
constexpr Op kOps[] = {Op::kAllReduce, Op::kAllReduceOutOfPlace, Op::kReduce,
                       Op::kBroadcast, Op::kAllGather,           Op::kGather,
                       Op::kScatter,   Op::kReduceScatter};

const char* OpName(Op op) {
  switch (op) {
    case Op::kAllReduce:
      return "AllReduce";
    case Op::kAllReduceOutOfPlace:
      return "AllReduce(out of place)";
    case Op::kReduce:
      return "Reduce";
    case Op::kBroadcast:
      return "Broadcast";
    case Op::kAllGather:
      return "AllGather";
    case Op::kGather:
      return "Gather";
    case Op::kScatter:
      return "Scatter";
    case Op::kReduceScatter:
      return "ReduceScatter";
  }
  return "?";
}

bool Reduces(Op op) {
  return op == Op::kAllReduce || op == Op::kAllReduceOutOfPlace || op == Op::kReduce || op == Op::kReduceScatter;
}

// Runs one case on this rank and checks its result.
template <typename T>
absl::Status RunCase(Communicator& comm, Op op, ReduceOp rop, int64_t count) {
  const int n = comm.size(), r = comm.rank();
  const int root = n > 1 ? 1 % n : 0;  // Not always rank 0.
  const std::string what = absl::StrCat(OpName(op), " ", DTypeName(DTypeOf<T>::value), " ",
                                        Reduces(op) ? ReduceOpName(rop) : "", " n=", n, " count=", count, " rank ", r);
  std::vector<T> expected;
  Tensor result;
  std::shared_ptr<Work> work;
  switch (op) {
    case Op::kAllReduce:
    case Op::kAllReduceOutOfPlace: {
      Tensor input = Filled<T>(count, rop, r);
      result = op == Op::kAllReduce ? input : *Tensor::Empty({count}, DTypeOf<T>::value);
      work = comm.AllReduce(input, result, rop);
      for (int64_t i = 0; i < count; ++i) expected.push_back(ExpectedReduce<T>(rop, n, i));
      if (op == Op::kAllReduceOutOfPlace) {
        if (auto s = work->Wait(); !s.ok()) return s;
        if (auto s = Compare(
                input,
                [&] {
                  std::vector<T> v;
                  for (int64_t i = 0; i < count; ++i)
                    v.push_back(FromDouble<T>(GridValue(rop, DTypeOf<T>::value, r, i)));
                  return v;
                }(),
                what + " (input kept)");
            !s.ok())
          return s;
      }
      break;
    }
    case Op::kReduce: {
      Tensor input = Filled<T>(count, rop, r);
      result = *Tensor::Empty({count}, DTypeOf<T>::value);
      work = comm.Reduce(input, result, rop, root);
      if (r == root) {
        for (int64_t i = 0; i < count; ++i) expected.push_back(ExpectedReduce<T>(rop, n, i));
      } else {
        result = input;  // Non-root inputs stay unchanged.
        for (int64_t i = 0; i < count; ++i) expected.push_back(FromDouble<T>(GridValue(rop, DTypeOf<T>::value, r, i)));
      }
      break;
    }
    case Op::kBroadcast:
      result = Filled<T>(count, rop, r);
      work = comm.Broadcast(result, root);
      for (int64_t i = 0; i < count; ++i) expected.push_back(FromDouble<T>(GridValue(rop, DTypeOf<T>::value, root, i)));
      break;
    case Op::kAllGather:
    case Op::kGather: {
      Tensor input = Filled<T>(count, rop, r);
      result = *Tensor::Empty({n * count}, DTypeOf<T>::value);
      work = op == Op::kAllGather ? comm.AllGather(input, result) : comm.Gather(input, result, root);
      if (op == Op::kAllGather || r == root) {
        for (int k = 0; k < n; ++k) {
          for (int64_t i = 0; i < count; ++i)
            expected.push_back(FromDouble<T>(GridValue(rop, DTypeOf<T>::value, k, i)));
        }
      } else {
        result = Tensor();
      }
      break;
    }
    case Op::kScatter: {
      // The root's input is n blocks; block k is "rank k's values".
      Tensor input = *Tensor::Empty({n * count}, DTypeOf<T>::value);
      for (int k = 0; k < n; ++k) {
        if (auto s = input.Flat(k * count, count)->CopyFrom(Filled<T>(count, rop, k)); !s.ok()) return s;
      }
      result = *Tensor::Empty({count}, DTypeOf<T>::value);
      work = comm.Scatter(r == root ? input : Tensor(), result, root);
      for (int64_t i = 0; i < count; ++i) expected.push_back(FromDouble<T>(GridValue(rop, DTypeOf<T>::value, r, i)));
      break;
    }
    case Op::kReduceScatter: {
      // Rank k's input is n blocks of `count`; element j of the whole input
      // uses index j, so block r of the result is the reduction at j = r*count + i.
      Tensor input = Filled<T>(n * count, rop, r);
      result = *Tensor::Empty({count}, DTypeOf<T>::value);
      work = comm.ReduceScatter(input, result, rop);
      for (int64_t i = 0; i < count; ++i) expected.push_back(ExpectedReduce<T>(rop, n, r * count + i));
      break;
    }
  }
  if (auto s = work->Wait(); !s.ok()) return absl::Status(s.code(), what + ": " + std::string(s.message()));
  if (!result.defined()) return absl::OkStatus();
  return Compare(result, expected, what);
}

absl::Status RunGrid(Communicator& comm, const std::vector<DType>& dtypes, const std::vector<int64_t>& counts) {
  return testing::RunGridCases(
      dtypes, kOps, counts, Reduces,
      [&](auto tag, Op op, ReduceOp rop, int64_t count) {
        return RunCase<typename decltype(tag)::type>(comm, op, rop, count);
      },
      [&] { return comm.Barrier()->Wait(); });
}

using testing::ExpectAllOk;

const std::vector<DType> kEveryDType(std::begin(kAllDTypes), std::end(kAllDTypes));

class ThreadGridTest : public ::testing::TestWithParam<int> {};

TEST_P(ThreadGridTest, EveryOpDtypeAndReduceOp) {
  const int n = GetParam();
  ExpectAllOk(RunThreads(n, [](Communicator& comm) { return RunGrid(comm, kEveryDType, {0, 1, 7, 1000}); }));
}

// The large count for every op and dtype (separate so each test stays short).
TEST_P(ThreadGridTest, LargeCounts) {
  const int n = GetParam();
  ExpectAllOk(RunThreads(n, [](Communicator& comm) { return RunGrid(comm, kEveryDType, {(1 << 20) + 3}); }));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ThreadGridTest, ::testing::Values(1, 2, 3, 4, 5));

TEST(ProcessGridTest, EveryOpOnRealProcesses) {
  for (int n : {2, 3, 5}) {
    ExpectAllOk(RunProcesses(n, [](Communicator& comm) {
      return RunGrid(comm, {DType::kF32, DType::kBF16, DType::kI64, DType::kU8}, {0, 1, 7, 1000, (1 << 18) + 3});
    }));
  }
}

// Random floats (not exactly representable sums): within a stated tolerance
// of a sequential double-precision sum, and bit-identical on every rank.
TEST(CommunicatorTest, RandomFloatsWithinToleranceAndIdenticalOnAllRanks) {
  constexpr int kN = 4;
  for (int64_t count : {int64_t{1000}, int64_t{300001}}) {
    std::vector<std::vector<float>> results(kN);
    ExpectAllOk(RunThreads(kN, [&](Communicator& comm) -> absl::Status {
      std::vector<float> values(count);
      for (int64_t i = 0; i < count; ++i) values[i] = std::sin(0.001f * i + comm.rank()) * 3.0f;
      Tensor t = *Tensor::FromVector<float>(values);
      if (auto s = comm.AllReduce(t, ReduceOp::kSum)->Wait(); !s.ok()) return s;
      results[comm.rank()] = *t.ToVector<float>();
      return absl::OkStatus();
    }));
    for (int64_t i = 0; i < count; ++i) {
      double expected = 0;
      for (int r = 0; r < kN; ++r) expected += static_cast<double>(std::sin(0.001f * i + r) * 3.0f);
      // Stated tolerance: 4 f32 additions, |x| <= 3: 1e-5 absolute is ~10 ulps.
      ASSERT_NEAR(results[0][i], expected, 1e-5) << "element " << i;
      for (int r = 1; r < kN; ++r) ASSERT_EQ(std::memcmp(&results[r][i], &results[0][i], 4), 0) << "rank " << r;
    }
  }
}

TEST(CommunicatorTest, SendRecvAndTags) {
  ExpectAllOk(RunThreads(3, [](Communicator& comm) -> absl::Status {
    const int r = comm.rank();
    if (r == 0) {
      Tensor a = *Tensor::FromVector<int32_t>(std::vector<int32_t>{1, 2, 3});
      Tensor b = *Tensor::FromVector<int32_t>(std::vector<int32_t>{4, 5});
      auto w1 = comm.Send(a, 2, 7);
      auto w2 = comm.Send(b, 2, 8);
      if (auto s = w1->Wait(); !s.ok()) return s;
      return w2->Wait();
    }
    if (r == 2) {
      Tensor a = *Tensor::Zeros({3}, DType::kI32);
      Tensor b = *Tensor::Zeros({2}, DType::kI32);
      if (auto s = comm.Recv(a, 0, 7)->Wait(); !s.ok()) return s;
      if (auto s = comm.Recv(b, 0, 8)->Wait(); !s.ok()) return s;
      if (*a.ToVector<int32_t>() != std::vector<int32_t>{1, 2, 3} ||
          *b.ToVector<int32_t>() != std::vector<int32_t>{4, 5}) {
        return absl::InternalError("wrong data received");
      }
    }
    return absl::OkStatus();
  }));
}

TEST(CommunicatorTest, BadArgumentsFailBeforeAnythingIsSent) {
  ExpectAllOk(RunThreads(2, [](Communicator& comm) -> absl::Status {
    Tensor f = *Tensor::Zeros({10}, DType::kF32);
    Tensor d = *Tensor::Zeros({10}, DType::kF64);
    Tensor small = *Tensor::Zeros({5}, DType::kF32);
    struct Case {
      std::shared_ptr<Work> work;
      const char* needle;
    } cases[] = {
        {comm.AllReduce(f, d, ReduceOp::kSum), "input is f32 but output is f64"},
        {comm.AllReduce(f, small, ReduceOp::kSum), "output has 5 elements, expected 10"},
        {comm.Broadcast(f, 2), "root 2 is not a rank (world size 2)"},
        {comm.Reduce(f, f, ReduceOp::kSum, -1), "root -1"},
        {comm.AllGather(f, f), "expected 20"},
        {comm.ReduceScatter(small, small, ReduceOp::kMax), "expected 10"},
        {comm.Send(f, comm.rank(), 0), "is not another rank"},
        {comm.Recv(f, 5, 0), "peer 5"},
        {comm.AllReduce(Tensor(), ReduceOp::kSum), "undefined"},
        {comm.AllReduce(f, static_cast<ReduceOp>(42)), "invalid reduce op"},
    };
    for (Case& c : cases) {
      if (!c.work->IsCompleted()) return absl::InternalError("a bad call was queued");
      const absl::Status s = c.work->status();
      if (s.ok() || s.message().find(c.needle) == absl::string_view::npos) {
        return absl::InternalError(absl::StrCat("expected an error with '", c.needle, "', got ", s.ToString()));
      }
    }
    // The communicator is still healthy: nothing was sent.
    return comm.AllReduce(f, ReduceOp::kSum)->Wait();
  }));
}

// The same grid through shared memory (collectives/bootstrap/shm_communicator.h).
namespace shm_grid {

using testing::RunShmProcesses;
using testing::RunShmThreads;

class ShmThreadGridTest : public ::testing::TestWithParam<int> {};

TEST_P(ShmThreadGridTest, EveryOpDtypeAndReduceOp) {
  const int n = GetParam();
  ExpectAllOk(RunShmThreads(n, [](Communicator& comm) { return RunGrid(comm, kEveryDType, {0, 1, 7, 1000}); }));
}

TEST_P(ShmThreadGridTest, LargeCounts) {
  const int n = GetParam();
  ExpectAllOk(RunShmThreads(n, [](Communicator& comm) { return RunGrid(comm, kEveryDType, {(1 << 20) + 3}); }));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmThreadGridTest, ::testing::Values(1, 2, 3, 4, 5));

TEST(ShmProcessGridTest, EveryOpOnRealProcesses) {
  for (int n : {2, 3, 5}) {
    ExpectAllOk(RunShmProcesses(n, [](Communicator& comm) {
      return RunGrid(comm, {DType::kF32, DType::kBF16, DType::kI64, DType::kU8}, {0, 1, 7, 1000, (1 << 18) + 3});
    }));
  }
}

// The same grids with single copy (process_vm_readv) from 64 bytes on:
// nearly every message of every op is a descriptor read from the sender.
ShmCommunicatorOptions SingleCopyOptions() {
  ShmCommunicatorOptions options = testing::ShmTestOptions();
  options.transport.single_copy_bytes = 64;
  options.transport.single_copy_max_bytes = SIZE_MAX;
  return options;
}

class ShmSingleCopyThreadGridTest : public ::testing::TestWithParam<int> {};

TEST_P(ShmSingleCopyThreadGridTest, EveryOpDtypeAndReduceOp) {
  const int n = GetParam();
  ExpectAllOk(RunShmThreads(
      n,
      [](Communicator& comm) {
        return RunGrid(comm, kEveryDType, {0, 1, 7, 1000});
      },
      SingleCopyOptions()));
}

TEST_P(ShmSingleCopyThreadGridTest, LargeCounts) {
  const int n = GetParam();
  ExpectAllOk(RunShmThreads(
      n, [](Communicator& comm) { return RunGrid(comm, kEveryDType, {(1 << 20) + 3}); }, SingleCopyOptions()));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmSingleCopyThreadGridTest, ::testing::Values(1, 2, 3, 4, 5));

// The process grid with single copy is in shm_single_copy_process_test.cc:
// testing::RunProcesses numbers its calls per process, so only the first
// test of a binary that calls it runs its ranks for real.

}  // namespace shm_grid

}  // namespace
}  // namespace lockstep
