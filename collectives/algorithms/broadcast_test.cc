// Binomial broadcast over the fake transport, from the first and last rank;
// BroadcastFrom with each of its choices.
#include "collectives/algorithms/broadcast.h"

#include <atomic>
#include <vector>

#include "collectives/algorithms/algorithm.h"
#include "collectives/algorithms/pipelined_tree.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using namespace testing;  // The algorithm test helpers.

TEST(BroadcastTest, EveryRankGetsTheRootsData) {
  for (const AlgorithmRun& run : StandardRuns()) {
    for (int root : {0, run.size - 1}) {
      for (int64_t count : {int64_t{1}, int64_t{10007}}) {
        auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
          Tensor t = ctx.rank() == root ? RankInput(root, count) : *Tensor::Zeros({count}, DType::kF32);
          LOCKSTEP_RETURN_IF_ERROR(BinomialBroadcast(ctx, t, root));
          return CheckValues(t, [&](int64_t i) { return InputValue(root, i); });
        });
        for (const absl::Status& s : results)
          ASSERT_TRUE(s.ok()) << Describe(run, count) << ", root " << root << ": " << s;
      }
    }
  }
}

TEST(BroadcastTest, BroadcastFromRunsWhicheverTreeIsChosen) {
  for (AllReduceAlgorithm forced : {AllReduceAlgorithm::kAuto, AllReduceAlgorithm::kTree, AllReduceAlgorithm::kRing}) {
    for (int n : {1, 4, 7}) {
      AlgorithmRun run;
      run.size = n;
      run.algorithms.all_reduce = forced;
      constexpr int64_t kCount = 300000;  // Large enough for the automatic choice to pipeline at 4 and 7.
      const bool pipelined = UsePipelinedTree(forced, LinkConstants(), kCount * 4.0, kCount, n, false);
      // At 4 ranks the tree is as deep as the binomial one (2 steps): the
      // model keeps the binomial tree; at 7 it pipelines.
      if (n > 1) {
        EXPECT_EQ(pipelined, forced == AllReduceAlgorithm::kTree || (forced == AllReduceAlgorithm::kAuto && n == 7))
            << n << " ranks";
      }
      std::vector<uint32_t> steps(n);
      auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
        Tensor t = ctx.rank() == 2 % n ? RankInput(2 % n, kCount) : *Tensor::Zeros({kCount}, DType::kF32);
        LOCKSTEP_RETURN_IF_ERROR(BroadcastFrom(ctx, t, 2 % n));
        steps[ctx.rank()] = ctx.next_tag;
        return CheckValues(t, [&](int64_t i) { return InputValue(2 % n, i); });
      });
      for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << n << " ranks: " << s;
      // The binomial tree takes ceil(log2 n) steps; the pipelined one more.
      int rounds = 0;
      while ((1 << rounds) < n) ++rounds;
      if (n > 1) {
        EXPECT_EQ(steps[0] > static_cast<uint32_t>(rounds), pipelined) << n << " ranks";
      }
    }
  }
}

}  // namespace
}  // namespace lockstep
