// Ring all-gather over the fake transport: chunks land in place on every rank.
#include "collectives/algorithms/all_gather.h"

#include <atomic>

#include "collectives/algorithms/algorithm.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using namespace testing;  // The algorithm test helpers.

TEST(AllGatherTest, EveryRankGetsEveryChunk) {
  for (const AlgorithmRun& run : StandardRuns()) {
    for (int64_t count : {int64_t{run.size}, int64_t{7} * run.size + 3, int64_t{10007}}) {
      auto owner = [&](int64_t i) {
        for (int r = 0; r < run.size; ++r) {
          const Chunk c = ChunkOf(count, run.size, r);
          if (i >= c.offset && i < c.offset + c.count) return r;
        }
        return -1;
      };
      auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
        Tensor t = *Tensor::Zeros({count}, DType::kF32);
        const Chunk mine = ChunkOf(count, ctx.size(), ctx.rank());
        for (int64_t i = 0; i < mine.count; ++i)
          t.data<float>()[mine.offset + i] = InputValue(ctx.rank(), mine.offset + i);
        LOCKSTEP_RETURN_IF_ERROR(RingAllGather(ctx, t));
        return CheckValues(t, [&](int64_t i) { return InputValue(owner(i), i); });
      });
      for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << Describe(run, count) << ": " << s;
    }
  }
}

TEST(AllGatherTest, UnevenBlocksIncludingEmptyOnes) {
  for (const AlgorithmRun& run : StandardRuns()) {
    for (int64_t scale : {int64_t{1}, int64_t{1001}}) {
      const std::vector<Chunk> blocks = BlocksOf(UnevenCounts(run.size, scale));
      const int64_t count = TotalOf(blocks);
      auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
        Tensor t = *Tensor::Zeros({count}, DType::kF32);
        const Chunk mine = blocks[ctx.rank()];
        for (int64_t i = 0; i < mine.count; ++i) t.data<float>()[mine.offset + i] = InputValue(ctx.rank(), i);
        LOCKSTEP_RETURN_IF_ERROR(RingAllGatherV(ctx, t, blocks));
        return CheckValues(t, [&](int64_t i) {
          const int owner = BlockOwning(blocks, i);
          return InputValue(owner, i - blocks[owner].offset);
        });
      });
      for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << Describe(run, count) << ": " << s;
    }
  }
}

}  // namespace
}  // namespace lockstep
