// The tree all-reduce over the fake transport at every world size from 1
// to 17: exact sums, maxes and averages; the same bits on every rank for
// inputs whose sum depends on the order.
#include "collectives/algorithms/tree_all_reduce.h"

#include <vector>

#include "collectives/algorithms/algorithm.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using namespace testing;  // The algorithm test helpers.

TEST(TreeAllReduceTest, SumsMaxesAndAveragesExactlyAtEveryWorldSize) {
  for (int n = 1; n <= 17; ++n) {
    AlgorithmRun run;
    run.size = n;
    run.capacity_bytes = n % 3 == 0 ? 100 : 64 << 10;
    // A link that makes the chunk count more than one at these sizes.
    run.algorithms.link = LinkConstants{1, 1.0 / 1250, 0};
    for (int64_t count : {int64_t{1}, int64_t{7} * n + 3, int64_t{40000}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
        auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
          Tensor t = RankInput(ctx.rank(), count);
          LOCKSTEP_RETURN_IF_ERROR(TreeAllReduce(ctx, t, op));
          return CheckValues(t, [&](int64_t i) { return ReducedValue(op, n, i); });
        });
        for (const absl::Status& s : results) {
          ASSERT_TRUE(s.ok()) << Describe(run, count) << ", op " << static_cast<int>(op) << ": " << s;
        }
      }
    }
  }
}

TEST(TreeAllReduceTest, EveryRankGetsTheSameBits) {
  for (int n = 1; n <= 17; ++n) {
    AlgorithmRun run;
    run.size = n;
    const absl::Status s = SameBitsOnEveryRank(
        run, 1031, [](AlgorithmContext& ctx, const Tensor& t) { return TreeAllReduce(ctx, t, ReduceOp::kSum); });
    EXPECT_TRUE(s.ok()) << s;
  }
}

}  // namespace
}  // namespace lockstep
