// Direct scatter over the fake transport.
#include "collectives/algorithms/scatter.h"

#include <atomic>

#include "collectives/algorithms/algorithm.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using namespace testing;  // The algorithm test helpers.

TEST(ScatterTest, EachRankGetsItsBlock) {
  for (const AlgorithmRun& run : StandardRuns()) {
    for (int root : {0, run.size - 1}) {
      constexpr int64_t kCount = 1001;
      auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
        Tensor mine = *Tensor::Zeros({kCount}, DType::kF32);
        Tensor slots;
        if (ctx.rank() == root) {
          slots = *Tensor::Empty({kCount * run.size}, DType::kF32);
          for (int64_t i = 0; i < kCount * run.size; ++i) {
            slots.data<float>()[i] = InputValue(static_cast<int>(i / kCount), i % kCount);
          }
        }
        LOCKSTEP_RETURN_IF_ERROR(DirectScatter(ctx, slots, mine, root));
        return CheckValues(mine, [&](int64_t i) { return InputValue(ctx.rank(), i); });
      });
      for (const absl::Status& s : results)
        ASSERT_TRUE(s.ok()) << Describe(run, kCount) << ", root " << root << ": " << s;
    }
  }
}

TEST(ScatterTest, UnevenBlocksIncludingEmptyOnes) {
  for (const AlgorithmRun& run : StandardRuns()) {
    for (int root : {0, run.size - 1}) {
      const std::vector<Chunk> blocks = BlocksOf(UnevenCounts(run.size, 301));
      auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
        Tensor mine = *Tensor::Zeros({blocks[ctx.rank()].count}, DType::kF32);
        Tensor slots;
        if (ctx.rank() == root) {
          slots = *Tensor::Empty({TotalOf(blocks)}, DType::kF32);
          for (int64_t i = 0; i < slots.numel(); ++i) {
            const int owner = BlockOwning(blocks, i);
            slots.data<float>()[i] = InputValue(owner, i - blocks[owner].offset);
          }
        }
        LOCKSTEP_RETURN_IF_ERROR(DirectScatterV(ctx, slots, mine, blocks, root));
        return CheckValues(mine, [&](int64_t i) { return InputValue(ctx.rank(), i); });
      });
      for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << Describe(run, 0) << ", root " << root << ": " << s;
    }
  }
}

}  // namespace
}  // namespace lockstep
