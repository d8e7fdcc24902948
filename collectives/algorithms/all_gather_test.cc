// Ring all-gather over the fake transport: chunks land in place on every rank.
#include "collectives/algorithms/all_gather.h"

#include <atomic>

#include "absl/strings/str_cat.h"
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

TEST(AllGatherTest, ChoosesBruckForManyRanksAndSmallGathers) {
  const LinkConstants network;  // 50 µs a step, 10 Gbit/s.
  constexpr auto kAuto = AllReduceAlgorithm::kAuto;
  EXPECT_FALSE(UseBruck(kAuto, network, 4096, 2));                      // One step either way.
  EXPECT_TRUE(UseBruck(kAuto, network, 64 << 10, 64));                  // 6 steps against 63.
  EXPECT_FALSE(UseBruck(kAuto, LinkConstantsFor("shm"), 64 << 20, 4));  // The copy costs more.
  EXPECT_FALSE(UseBruck(AllReduceAlgorithm::kRing, network, 64 << 10, 64));
  EXPECT_TRUE(UseBruck(AllReduceAlgorithm::kRabenseifner, LinkConstantsFor("shm"), 64 << 20, 4));
  // The entry point runs what it chose: 5 ranks forced to Bruck's and to the ring.
  for (AllReduceAlgorithm forced : {AllReduceAlgorithm::kRabenseifner, AllReduceAlgorithm::kRing}) {
    AlgorithmRun run;
    run.size = 5;
    run.algorithms.all_reduce = forced;
    constexpr int64_t kCount = 5 * 40;
    auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
      Tensor t = RankInput(ctx.rank(), kCount);
      LOCKSTEP_RETURN_IF_ERROR(AllGather(ctx, t));
      // The ring takes n - 1 steps, Bruck's ceil(log2 n) = 3.
      const uint32_t steps = forced == AllReduceAlgorithm::kRing ? 4 : 3;
      if (ctx.next_tag != steps) return absl::InternalError(absl::StrCat(ctx.next_tag, " steps"));
      return CheckValues(t, [&](int64_t i) { return InputValue(static_cast<int>(i / 40), i); });
    });
    for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
  }
}

TEST(AllGatherTest, RanksSharingAHostsLinkKeepLargeGathersOnTheRing) {
  // 64 ranks, 8 a host: Bruck's far steps send from all 8 at once, so the
  // ring wins from ~550 KB (the lab measured the crossing between 256 KiB
  // and 1 MiB); one rank a host, Bruck's wins far longer.
  const LinkConstants network;
  constexpr auto kAuto = AllReduceAlgorithm::kAuto;
  EXPECT_TRUE(UseBruck(kAuto, network, 256 << 10, 64, 8));
  EXPECT_FALSE(UseBruck(kAuto, network, 1 << 20, 64, 8));
  EXPECT_TRUE(UseBruck(kAuto, network, 1 << 20, 64, 1));
}

}  // namespace
}  // namespace lockstep
