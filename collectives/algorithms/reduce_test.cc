// Binomial reduce over the fake transport, to the first and last rank.
#include "collectives/algorithms/reduce.h"

#include <atomic>

#include "collectives/algorithms/algorithm.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using namespace testing;  // The algorithm test helpers.

TEST(ReduceTest, TheRootGetsTheSum) {
  for (const AlgorithmRun& run : StandardRuns()) {
    for (int root : {0, run.size - 1}) {
      for (int64_t count : {int64_t{1}, int64_t{10007}}) {
        auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
          Tensor t = RankInput(ctx.rank(), count);
          LOCKSTEP_RETURN_IF_ERROR(BinomialReduce(ctx, t, ReduceOp::kSum, root));
          if (ctx.rank() != root) return absl::OkStatus();
          return CheckValues(t, [&](int64_t i) { return SumOver(run.size, i); });
        });
        for (const absl::Status& s : results)
          ASSERT_TRUE(s.ok()) << Describe(run, count) << ", root " << root << ": " << s;
      }
    }
  }
}

TEST(ReduceTest, OutOfPlaceLeavesTheInputUntouched) {
  for (const AlgorithmRun& run : StandardRuns()) {
    for (int root : {0, run.size - 1}) {
      constexpr int64_t kCount = 1001;
      auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
        Tensor input = RankInput(ctx.rank(), kCount);
        Tensor output = ctx.rank() == root ? *Tensor::Zeros({kCount}, DType::kF32) : Tensor();
        LOCKSTEP_RETURN_IF_ERROR(BinomialReduce(ctx, input, output, ReduceOp::kSum, root));
        LOCKSTEP_RETURN_IF_ERROR(CheckValues(input, [&](int64_t i) { return InputValue(ctx.rank(), i); }));
        if (ctx.rank() != root) return absl::OkStatus();
        return CheckValues(output, [&](int64_t i) { return SumOver(run.size, i); });
      });
      for (const absl::Status& s : results)
        ASSERT_TRUE(s.ok()) << Describe(run, kCount) << ", root " << root << ": " << s;
    }
  }
}

}  // namespace
}  // namespace lockstep
