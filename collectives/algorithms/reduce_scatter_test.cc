// Ring reduce-scatter over the fake transport: chunk r of rank r is the sum.
#include "collectives/algorithms/reduce_scatter.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "collectives/algorithms/algorithm.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using namespace testing;  // The algorithm test helpers.

TEST(ReduceScatterTest, EachRankGetsItsReducedChunk) {
  for (const AlgorithmRun& run : StandardRuns()) {
    for (int64_t count : {int64_t{run.size}, int64_t{7} * run.size + 3, int64_t{10007}}) {
      auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
        Tensor t = RankInput(ctx.rank(), count);
        LOCKSTEP_RETURN_IF_ERROR(RingReduceScatter(ctx, t, ReduceOp::kSum));
        const Chunk mine = ChunkOf(count, ctx.size(), ctx.rank());
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor chunk, t.Flat(mine.offset, mine.count));
        return CheckValues(chunk, [&](int64_t i) { return SumOver(run.size, mine.offset + i); });
      });
      for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << Describe(run, count) << ": " << s;
    }
  }
}

TEST(ReduceScatterTest, OutOfPlaceLeavesTheInputUntouched) {
  for (const AlgorithmRun& run : StandardRuns()) {
    for (int64_t count : {int64_t{run.size}, int64_t{7} * run.size + 3, int64_t{10007}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
          Tensor input = RankInput(ctx.rank(), count);
          Tensor buffer = *Tensor::Zeros({count}, DType::kF32);
          LOCKSTEP_RETURN_IF_ERROR(RingReduceScatter(ctx, input, buffer, op));
          LOCKSTEP_RETURN_IF_ERROR(CheckValues(input, [&](int64_t i) { return InputValue(ctx.rank(), i); }));
          const Chunk mine = ChunkOf(count, ctx.size(), ctx.rank());
          LOCKSTEP_ASSIGN_OR_RETURN(Tensor chunk, buffer.Flat(mine.offset, mine.count));
          return CheckValues(chunk, [&](int64_t i) {
            return op == ReduceOp::kSum ? SumOver(run.size, mine.offset + i)
                                        : InputValue(run.size - 1, mine.offset + i);
          });
        });
        for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << Describe(run, count) << ": " << s;
      }
    }
  }
}

TEST(ReduceScatterTest, UnevenBlocksIncludingEmptyOnes) {
  for (const AlgorithmRun& run : StandardRuns()) {
    for (int64_t scale : {int64_t{1}, int64_t{1001}}) {
      const std::vector<Chunk> blocks = BlocksOf(UnevenCounts(run.size, scale));
      const int64_t count = TotalOf(blocks);
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
          Tensor input = RankInput(ctx.rank(), count);
          Tensor buffer = *Tensor::Zeros({count}, DType::kF32);
          LOCKSTEP_RETURN_IF_ERROR(RingReduceScatterV(ctx, input, buffer, blocks, op));
          const Chunk mine = blocks[ctx.rank()];
          LOCKSTEP_ASSIGN_OR_RETURN(Tensor block, buffer.Flat(mine.offset, mine.count));
          return CheckValues(block, [&](int64_t i) {
            return op == ReduceOp::kSum ? SumOver(run.size, mine.offset + i)
                                        : InputValue(run.size - 1, mine.offset + i);
          });
        });
        for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << Describe(run, count) << ": " << s;
      }
    }
  }
}

TEST(ReduceScatterTest, ChoosesRecursiveHalvingForManyRanks) {
  const LinkConstants network;  // 50 µs a step, 10 Gbit/s.
  constexpr auto kAuto = AllReduceAlgorithm::kAuto;
  EXPECT_FALSE(UseRecursiveHalving(kAuto, network, 4096, 2));
  EXPECT_TRUE(UseRecursiveHalving(kAuto, network, 1 << 20, 64));  // 6 steps against 63.
  EXPECT_FALSE(UseRecursiveHalving(kAuto, LinkConstantsFor("shm"), 64 << 20, 4));
  EXPECT_FALSE(UseRecursiveHalving(AllReduceAlgorithm::kRing, network, 1 << 20, 64));
  EXPECT_TRUE(UseRecursiveHalving(AllReduceAlgorithm::kRecursiveDoubling, network, 4096, 3));
  for (AllReduceAlgorithm forced : {AllReduceAlgorithm::kRabenseifner, AllReduceAlgorithm::kRing}) {
    AlgorithmRun run;
    run.size = 6;
    run.algorithms.all_reduce = forced;
    constexpr int64_t kCount = 6 * 50;
    auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
      const Tensor input = RankInput(ctx.rank(), kCount);
      Tensor buffer = *Tensor::Empty({kCount}, DType::kF32);
      LOCKSTEP_RETURN_IF_ERROR(ReduceScatter(ctx, input, buffer, ReduceOp::kSum));
      // The ring: n - 1 steps; halving: fold, log2 4, unfold.
      const uint32_t steps = forced == AllReduceAlgorithm::kRing ? 5 : 4;
      if (ctx.next_tag != steps) return absl::InternalError(absl::StrCat(ctx.next_tag, " steps"));
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine, buffer.Flat(ctx.rank() * 50, 50));
      return CheckValues(mine, [&](int64_t j) { return SumOver(6, ctx.rank() * 50 + j); });
    });
    for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
  }
}

TEST(ReduceScatterTest, RanksSharingAHostsLinkKeepLargeReductionsOnTheRing) {
  const LinkConstants network;
  constexpr auto kAuto = AllReduceAlgorithm::kAuto;
  EXPECT_TRUE(UseRecursiveHalving(kAuto, network, 256 << 10, 64, 8));
  EXPECT_FALSE(UseRecursiveHalving(kAuto, network, 1 << 20, 64, 8));
  EXPECT_TRUE(UseRecursiveHalving(kAuto, network, 1 << 20, 64, 1));
}

}  // namespace
}  // namespace lockstep
