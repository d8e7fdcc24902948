// The collectives beyond c10d's basic set, as a grid like communicator_test's:
// uneven blocks (AllGatherV, ReduceScatterV, GatherV, ScatterV), AllToAll and
// AllToAllV, AllReduceCoalesced and BroadcastCoalesced, for every dtype and
// reduce op that applies, world sizes 1-5 (threads) and 2-4 (processes),
// counts {0, 1, odd, not divisible by the world size, large}, over TCP and
// shared memory, against values computed independently
// (collectives/testing/grid_values.h), compared exactly.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/communicator.h"
#include "collectives/testing/grid_values.h"
#include "collectives/testing/group.h"
#include "core/dtype.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using testing::Compare;
using testing::ExpectedReduce;
using testing::Filled;
using testing::FromDouble;
using testing::GridValue;

enum class Op {
  kAllGatherV,
  kReduceScatterV,
  kGatherV,
  kScatterV,
  kAllToAll,
  kAllToAllV,
  kAllReduceCoalesced,
  kBroadcastCoalesced,
};
constexpr Op kOps[] = {Op::kAllGatherV, Op::kReduceScatterV,     Op::kGatherV,           Op::kScatterV, Op::kAllToAll,
                       Op::kAllToAllV,  Op::kAllReduceCoalesced, Op::kBroadcastCoalesced};

const char* OpName(Op op) {
  switch (op) {
    case Op::kAllGatherV:
      return "AllGatherV";
    case Op::kReduceScatterV:
      return "ReduceScatterV";
    case Op::kGatherV:
      return "GatherV";
    case Op::kScatterV:
      return "ScatterV";
    case Op::kAllToAll:
      return "AllToAll";
    case Op::kAllToAllV:
      return "AllToAllV";
    case Op::kAllReduceCoalesced:
      return "AllReduceCoalesced";
    case Op::kBroadcastCoalesced:
      return "BroadcastCoalesced";
  }
  return "?";
}

bool Reduces(Op op) { return op == Op::kReduceScatterV || op == Op::kAllReduceCoalesced; }

// Rank r's block of an uneven collective for base count c: some ranks'
// blocks empty, the others of different sizes (none for c = 0).
std::vector<int64_t> UnevenCounts(int n, int64_t c) {
  std::vector<int64_t> counts;
  for (int r = 0; r < n; ++r) counts.push_back(c == 0 || r % 3 == 1 ? 0 : c + r * (c % 7 + 1));
  return counts;
}

// Elements rank `from` sends to rank `to` in AllToAllV.
int64_t PairCount(int from, int to, int64_t c) {
  return c == 0 || (from * 3 + to * 5) % 4 == 0 ? 0 : c + from + 2 * to;
}

// The value stream of the block `from` sends to `to` (a "rank" of its own).
int PairStream(int from, int to) { return from * 7 + to; }

int64_t Sum(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

template <typename T>
void AppendValues(std::vector<T>* out, ReduceOp rop, int stream, int64_t count, int64_t offset = 0) {
  for (int64_t i = 0; i < count; ++i)
    out->push_back(FromDouble<T>(GridValue(rop, DTypeOf<T>::value, stream, offset + i)));
}

template <typename T>
Tensor Values(const std::vector<T>& v) {
  Tensor t = *Tensor::Empty({static_cast<int64_t>(v.size())}, DTypeOf<T>::value);
  for (size_t i = 0; i < v.size(); ++i) t.data<T>()[i] = v[i];
  return t;
}

template <typename T>
absl::Status Check(const absl::Status& waited, const Tensor& got, const std::vector<T>& expected,
                   const std::string& what) {
  if (!waited.ok()) return absl::Status(waited.code(), absl::StrCat(what, ": ", waited.message()));
  return Compare(got, expected, what);
}

template <typename T>
absl::Status RunCase(Communicator& comm, Op op, ReduceOp rop, int64_t c) {
  constexpr DType kType = DTypeOf<T>::value;
  const int n = comm.size(), r = comm.rank();
  const int root = n > 1 ? 1 % n : 0;
  const std::string what = absl::StrCat(OpName(op), " ", DTypeName(kType), " ", Reduces(op) ? ReduceOpName(rop) : "",
                                        " n=", n, " c=", c, " rank ", r);
  switch (op) {
    case Op::kAllGatherV:
    case Op::kGatherV: {
      const std::vector<int64_t> counts = UnevenCounts(n, c);
      Tensor input = Filled<T>(counts[r], rop, r);
      Tensor output = *Tensor::Empty({Sum(counts)}, kType);
      std::vector<T> expected;
      for (int k = 0; k < n; ++k) AppendValues(&expected, rop, k, counts[k]);
      if (op == Op::kAllGatherV) return Check(comm.AllGatherV(input, output, counts)->Wait(), output, expected, what);
      const absl::Status s = comm.GatherV(input, r == root ? output : Tensor(), counts, root)->Wait();
      if (r != root) return s;
      return Check(s, output, expected, what);
    }
    case Op::kScatterV: {
      const std::vector<int64_t> counts = UnevenCounts(n, c);
      std::vector<T> all;
      for (int k = 0; k < n; ++k) AppendValues(&all, rop, k, counts[k]);
      Tensor output = *Tensor::Empty({counts[r]}, kType);
      std::vector<T> expected;
      AppendValues(&expected, rop, r, counts[r]);
      return Check(comm.ScatterV(r == root ? Values(all) : Tensor(), output, counts, root)->Wait(), output, expected,
                   what);
    }
    case Op::kReduceScatterV: {
      // Element j of the whole input uses index j: block r's reduction is at
      // j = offset(r) + i.
      const std::vector<int64_t> counts = UnevenCounts(n, c);
      int64_t offset = 0;
      for (int k = 0; k < r; ++k) offset += counts[k];
      Tensor input = Filled<T>(Sum(counts), rop, r);
      Tensor output = *Tensor::Empty({counts[r]}, kType);
      std::vector<T> expected;
      for (int64_t i = 0; i < counts[r]; ++i) expected.push_back(ExpectedReduce<T>(rop, n, offset + i));
      return Check(comm.ReduceScatterV(input, output, counts, rop)->Wait(), output, expected, what);
    }
    case Op::kAllToAll: {
      // Block j of rank r's input: stream (r, j); block i of the output: (i, r).
      std::vector<T> send, expected;
      for (int j = 0; j < n; ++j) AppendValues(&send, rop, PairStream(r, j), c);
      for (int i = 0; i < n; ++i) AppendValues(&expected, rop, PairStream(i, r), c);
      Tensor output = *Tensor::Empty({n * c}, kType);
      return Check(comm.AllToAll(Values(send), output)->Wait(), output, expected, what);
    }
    case Op::kAllToAllV: {
      std::vector<int64_t> send_counts, recv_counts;
      std::vector<T> send, expected;
      for (int j = 0; j < n; ++j) {
        send_counts.push_back(PairCount(r, j, c));
        AppendValues(&send, rop, PairStream(r, j), send_counts.back());
      }
      for (int i = 0; i < n; ++i) {
        recv_counts.push_back(PairCount(i, r, c));
        AppendValues(&expected, rop, PairStream(i, r), recv_counts.back());
      }
      Tensor output = *Tensor::Empty({Sum(recv_counts)}, kType);
      return Check(comm.AllToAllV(Values(send), output, send_counts, recv_counts)->Wait(), output, expected, what);
    }
    case Op::kAllReduceCoalesced: {
      // Three tensors (one empty), each a slice of the same value stream.
      const int64_t sizes[] = {c, 0, c + 3};
      std::vector<Tensor> tensors;
      int64_t offset = 0;
      for (int64_t size : sizes) {
        tensors.push_back(Filled<T>(size, rop, r, offset));
        offset += size;
      }
      if (auto s = comm.AllReduceCoalesced(tensors, rop)->Wait(); !s.ok()) return Check<T>(s, Tensor(), {}, what);
      offset = 0;
      for (size_t k = 0; k < tensors.size(); ++k) {
        std::vector<T> expected;
        for (int64_t i = 0; i < sizes[k]; ++i) expected.push_back(ExpectedReduce<T>(rop, n, offset + i));
        offset += sizes[k];
        if (auto s = Compare(tensors[k], expected, absl::StrCat(what, " tensor ", k)); !s.ok()) return s;
      }
      return absl::OkStatus();
    }
    case Op::kBroadcastCoalesced: {
      // Mixed dtypes: this one, i64 and u8, of different sizes.
      std::vector<Tensor> tensors = {Filled<T>(c, rop, r), Filled<int64_t>(c / 2 + 1, rop, r, 5),
                                     Filled<uint8_t>(c % 13, rop, r, 9)};
      if (auto s = comm.BroadcastCoalesced(tensors, root)->Wait(); !s.ok()) return Check<T>(s, Tensor(), {}, what);
      std::vector<T> a;
      std::vector<int64_t> b;
      std::vector<uint8_t> u;
      AppendValues(&a, rop, root, c);
      AppendValues(&b, rop, root, c / 2 + 1, 5);
      AppendValues(&u, rop, root, c % 13, 9);
      if (auto s = Compare(tensors[0], a, what + " tensor 0"); !s.ok()) return s;
      if (auto s = Compare(tensors[1], b, what + " tensor 1"); !s.ok()) return s;
      return Compare(tensors[2], u, what + " tensor 2");
    }
  }
  return absl::InternalError("unknown op");
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
// Counts: 0, 1, odd, not divisible by the world sizes, larger than a ring
// segment; the large ones separately.
const std::vector<int64_t> kCounts = {0, 1, 7, 1000};
const std::vector<int64_t> kLargeCounts = {(1 << 18) + 3};

class TcpGridTest : public ::testing::TestWithParam<int> {};

TEST_P(TcpGridTest, EveryOpDtypeAndReduceOp) {
  ExpectAllOk(testing::RunThreads(GetParam(), [](Communicator& comm) { return RunGrid(comm, kEveryDType, kCounts); }));
}

TEST_P(TcpGridTest, LargeCounts) {
  ExpectAllOk(testing::RunThreads(GetParam(), [](Communicator& comm) {
    return RunGrid(comm, {DType::kF32, DType::kBF16, DType::kI8, DType::kBool}, kLargeCounts);
  }));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, TcpGridTest, ::testing::Values(1, 2, 3, 4, 5));

class ShmGridTest : public ::testing::TestWithParam<int> {};

TEST_P(ShmGridTest, EveryOpDtypeAndReduceOp) {
  ExpectAllOk(
      testing::RunShmThreads(GetParam(), [](Communicator& comm) { return RunGrid(comm, kEveryDType, kCounts); }));
}

TEST_P(ShmGridTest, LargeCounts) {
  ExpectAllOk(testing::RunShmThreads(GetParam(), [](Communicator& comm) {
    return RunGrid(comm, {DType::kF32, DType::kF64, DType::kI32, DType::kU8}, kLargeCounts);
  }));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmGridTest, ::testing::Values(1, 2, 3, 4, 5));

TEST(ProcessGridTest, TcpProcesses) {
  for (int n : {2, 3, 4}) {
    ExpectAllOk(testing::RunProcesses(n, [](Communicator& comm) {
      return RunGrid(comm, {DType::kF32, DType::kI8, DType::kBool, DType::kI64}, {0, 1, 7, 1000, (1 << 16) + 3});
    }));
  }
}

TEST(ProcessGridTest, ShmProcesses) {
  for (int n : {2, 3, 4}) {
    ExpectAllOk(testing::RunShmProcesses(n, [](Communicator& comm) {
      return RunGrid(comm, {DType::kBF16, DType::kU8, DType::kI32}, {0, 1, 7, 1000, (1 << 16) + 3});
    }));
  }
}

}  // namespace
}  // namespace lockstep
