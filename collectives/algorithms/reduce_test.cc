// Binomial reduce over the fake transport, to the first and last rank;
// ReduceTo with each of its choices.
#include "collectives/algorithms/reduce.h"

#include <atomic>

#include "collectives/algorithms/algorithm.h"
#include "collectives/algorithms/pipelined_tree.h"
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

TEST(ReduceTest, ReduceToRunsWhicheverTreeIsChosen) {
  for (AllReduceAlgorithm forced : {AllReduceAlgorithm::kAuto, AllReduceAlgorithm::kTree, AllReduceAlgorithm::kRing}) {
    for (int n : {1, 4, 7}) {
      AlgorithmRun run;
      run.size = n;
      run.algorithms.all_reduce = forced;
      constexpr int64_t kCount = 300000;
      const bool pipelined = UsePipelinedTree(forced, LinkConstants(), kCount * 4.0, kCount, n, true);
      // At 4 ranks the tree is as deep as the binomial one (2 steps): the
      // model keeps the binomial tree; at 7 it pipelines.
      if (n > 1) {
        EXPECT_EQ(pipelined, forced == AllReduceAlgorithm::kTree || (forced == AllReduceAlgorithm::kAuto && n == 7))
            << n << " ranks";
      }
      auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
        Tensor input = RankInput(ctx.rank(), kCount);
        Tensor output = ctx.rank() == n - 1 ? *Tensor::Zeros({kCount}, DType::kF32) : Tensor();
        LOCKSTEP_RETURN_IF_ERROR(ReduceTo(ctx, input, output, ReduceOp::kAvg, n - 1));
        LOCKSTEP_RETURN_IF_ERROR(CheckValues(input, [&](int64_t i) { return InputValue(ctx.rank(), i); }));
        if (ctx.rank() != n - 1) return absl::OkStatus();
        return CheckValues(output, [&](int64_t i) { return SumOver(n, i) / static_cast<float>(n); });
      });
      for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << n << " ranks: " << s;
    }
  }
}

}  // namespace
}  // namespace lockstep
