// Direct gather over the fake transport.
#include "collectives/algorithms/gather.h"

#include <atomic>

#include "collectives/algorithms/algorithm.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using namespace testing;  // The algorithm test helpers.

TEST(GatherTest, TheRootGetsEveryRanksBlock) {
  for (const AlgorithmRun& run : StandardRuns()) {
    for (int root : {0, run.size - 1}) {
      constexpr int64_t kCount = 1001;
      auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
        Tensor mine = RankInput(ctx.rank(), kCount);
        if (ctx.rank() != root) return DirectGather(ctx, mine, Tensor(), root);
        Tensor slots = *Tensor::Zeros({kCount * run.size}, DType::kF32);
        LOCKSTEP_RETURN_IF_ERROR(DirectGather(ctx, mine, slots, root));
        return CheckValues(slots, [&](int64_t i) { return InputValue(static_cast<int>(i / kCount), i % kCount); });
      });
      for (const absl::Status& s : results)
        ASSERT_TRUE(s.ok()) << Describe(run, kCount) << ", root " << root << ": " << s;
    }
  }
}

TEST(GatherTest, UnevenBlocksIncludingEmptyOnes) {
  for (const AlgorithmRun& run : StandardRuns()) {
    for (int root : {0, run.size - 1}) {
      const std::vector<Chunk> blocks = BlocksOf(UnevenCounts(run.size, 301));
      auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
        Tensor mine = RankInput(ctx.rank(), blocks[ctx.rank()].count);
        if (ctx.rank() != root) return DirectGatherV(ctx, mine, Tensor(), blocks, root);
        Tensor slots = *Tensor::Zeros({TotalOf(blocks)}, DType::kF32);
        LOCKSTEP_RETURN_IF_ERROR(DirectGatherV(ctx, mine, slots, blocks, root));
        return CheckValues(slots, [&](int64_t i) {
          const int owner = BlockOwning(blocks, i);
          return InputValue(owner, i - blocks[owner].offset);
        });
      });
      for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << Describe(run, 0) << ", root " << root << ": " << s;
    }
  }
}

}  // namespace
}  // namespace lockstep
