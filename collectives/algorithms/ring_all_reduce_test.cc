// Ring all-reduce over the fake transport: world sizes 1-5, counts that do
// and do not divide by the world size, tiny connection buffers and segments.
#include "collectives/algorithms/ring_all_reduce.h"

#include <atomic>

#include "collectives/algorithms/algorithm.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using namespace testing;  // The algorithm test helpers.

TEST(RingAllReduceTest, SumsAndMaxesExactlyOnEveryRank) {
  for (const AlgorithmRun& run : StandardRuns()) {
    for (int64_t count : {int64_t{run.size}, int64_t{7} * run.size + 3, int64_t{10007}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
          Tensor t = RankInput(ctx.rank(), count);
          LOCKSTEP_RETURN_IF_ERROR(RingAllReduce(ctx, t, op));
          return CheckValues(
              t, [&](int64_t i) { return op == ReduceOp::kSum ? SumOver(run.size, i) : InputValue(run.size - 1, i); });
        });
        for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << Describe(run, count) << ": " << s;
      }
    }
  }
}

}  // namespace
}  // namespace lockstep
