// Recursive-doubling all-reduce over the fake transport, including world
// sizes that are not powers of two (the fold/unfold path).
#include "collectives/algorithms/recursive_doubling_all_reduce.h"

#include <atomic>

#include "collectives/algorithms/algorithm.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using namespace testing;  // The algorithm test helpers.

TEST(RecursiveDoublingAllReduceTest, SumsAndMinsExactlyOnEveryRank) {
  for (const AlgorithmRun& run : StandardRuns()) {
    for (int64_t count : {int64_t{1}, int64_t{5}, int64_t{3001}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin}) {
        auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
          Tensor t = RankInput(ctx.rank(), count);
          LOCKSTEP_RETURN_IF_ERROR(RecursiveDoublingAllReduce(ctx, t, op));
          return CheckValues(t,
                             [&](int64_t i) { return op == ReduceOp::kSum ? SumOver(run.size, i) : InputValue(0, i); });
        });
        for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << Describe(run, count) << ": " << s;
      }
    }
  }
}

}  // namespace
}  // namespace lockstep
