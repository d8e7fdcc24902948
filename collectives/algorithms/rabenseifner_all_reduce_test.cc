// Rabenseifner's all-reduce over the fake transport at every world size
// from 1 to 17: exact sums, maxes and averages; the same bits on every rank
// for inputs whose sum depends on the order; the bytes each rank sends.
#include "collectives/algorithms/rabenseifner_all_reduce.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/algorithms/algorithm.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using namespace testing;  // The algorithm test helpers.

std::vector<AlgorithmRun> WorldsOneToSeventeen() {
  std::vector<AlgorithmRun> runs;
  for (int n = 1; n <= 17; ++n) {
    AlgorithmRun run;
    run.size = n;
    run.capacity_bytes = n % 3 == 0 ? 100 : 64 << 10;  // Some worlds block every transfer.
    runs.push_back(run);
  }
  return runs;
}

TEST(RabenseifnerAllReduceTest, SumsMaxesAndAveragesExactlyAtEveryWorldSize) {
  for (const AlgorithmRun& run : WorldsOneToSeventeen()) {
    const int n = run.size;
    // Fewer elements than ranks (empty chunks), uneven chunks, many.
    for (int64_t count : {int64_t{1}, int64_t{n}, int64_t{7} * n + 3, int64_t{4099}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
        auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
          Tensor t = RankInput(ctx.rank(), count);
          LOCKSTEP_RETURN_IF_ERROR(RabenseifnerAllReduce(ctx, t, op));
          return CheckValues(t, [&](int64_t i) { return ReducedValue(op, n, i); });
        });
        for (const absl::Status& s : results) {
          ASSERT_TRUE(s.ok()) << Describe(run, count) << ", op " << static_cast<int>(op) << ": " << s;
        }
      }
    }
  }
}

TEST(RabenseifnerAllReduceTest, EveryRankGetsTheSameBits) {
  // Equal results for order-sensitive sums show one reduction copied, not
  // p computed.
  for (const AlgorithmRun& run : WorldsOneToSeventeen()) {
    const absl::Status s = SameBitsOnEveryRank(run, 1031, [](AlgorithmContext& ctx, const Tensor& t) {
      return RabenseifnerAllReduce(ctx, t, ReduceOp::kSum);
    });
    EXPECT_TRUE(s.ok()) << s;
  }
}

TEST(RabenseifnerAllReduceTest, SendsTheRingsBytesInLogarithmicSteps) {
  // A power of two sends 2(p-1)/p of the buffer; 6 ranks fold 2 pairs
  // (the even rank of a pair sends all of it, the odd one gets and returns
  // it) around a 4-rank core.
  constexpr int64_t kCount = 4096;  // Divides by 4 and 8: chunks are equal.
  for (int n : {2, 4, 8, 6}) {
    AlgorithmRun run;
    run.size = n;
    std::vector<uint64_t> sent(n), messages(n);
    auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
      Tensor t = RankInput(ctx.rank(), kCount);
      LOCKSTEP_RETURN_IF_ERROR(RabenseifnerAllReduce(ctx, t, ReduceOp::kSum));
      const TrafficCounters traffic = ctx.transport.Traffic();
      for (uint64_t b : traffic.bytes_sent) sent[ctx.rank()] += b;
      return absl::OkStatus();
    });
    for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
    const uint64_t bytes = kCount * sizeof(float);
    const PowerOfTwoFold shape(n, 0);
    for (int r = 0; r < n; ++r) {
      const PowerOfTwoFold fold(n, r);
      const uint64_t core = 2 * bytes * (shape.p - 1) / shape.p;
      const uint64_t want = !fold.paired() ? core : fold.folded_away() ? bytes : core + bytes;
      EXPECT_EQ(sent[r], want) << n << " ranks, rank " << r;
    }
  }
}

}  // namespace
}  // namespace lockstep
