// The all-reduce entry point: the choice (ChooseAllReduce) by size, world
// and link constants, and forced; each algorithm it runs gives exact sums,
// seen in the bytes each rank sends.
#include "collectives/algorithms/all_reduce.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "collectives/algorithms/algorithm.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using namespace testing;  // The algorithm test helpers.

constexpr size_t kSmall = 256 << 10;
constexpr auto kAuto = AllReduceAlgorithm::kAuto;
constexpr auto kRing = AllReduceAlgorithm::kRing;
constexpr auto kDoubling = AllReduceAlgorithm::kRecursiveDoubling;
constexpr auto kRabenseifner = AllReduceAlgorithm::kRabenseifner;

TEST(AllReduceTest, ChoosesByTheModel) {
  const LinkConstants network;  // 50 µs, 10 Gbit/s.
  const LinkConstants shm = LinkConstantsFor("shm");
  // Below small_message_bytes: recursive doubling.
  EXPECT_EQ(ChooseAllReduce(kAuto, kSmall, network, 4096, 1024, 64), kDoubling);
  // 2 ranks: the same transfers, the ring pipelined. 3: a fold costs more
  // than the ring's 2 extra steps.
  EXPECT_EQ(ChooseAllReduce(kAuto, kSmall, network, 64 << 20, 16 << 20, 2), kRing);
  EXPECT_EQ(ChooseAllReduce(kAuto, kSmall, network, 1 << 20, 1 << 18, 3), kRing);
  // A power of two over a network: Rabenseifner's 2 log2 p steps against
  // the ring's 2(p - 1), the same bytes.
  EXPECT_EQ(ChooseAllReduce(kAuto, kSmall, network, 1 << 20, 1 << 18, 4), kRabenseifner);
  EXPECT_EQ(ChooseAllReduce(kAuto, kSmall, network, 64 << 20, 16 << 20, 1024), kRabenseifner);
  // Over shared memory a step costs ~1 µs: the ring's overlapped reduction wins.
  EXPECT_EQ(ChooseAllReduce(kAuto, kSmall, shm, 1 << 20, 1 << 18, 4), kRing);
  // 17 ranks: folding 1 MiB twice costs more than 30 steps of 50 µs; 1,000
  // ranks (fold 2 x 488): 1,998 steps against 22 win up to ~58 MB.
  EXPECT_EQ(ChooseAllReduce(kAuto, kSmall, network, 1 << 20, 1 << 18, 17), kRing);
  EXPECT_EQ(ChooseAllReduce(kAuto, kSmall, network, 25 << 20, 25 << 18, 1000), kRabenseifner);
  // Forced: at every size, except where it cannot run (fewer elements than
  // ranks takes recursive doubling).
  EXPECT_EQ(ChooseAllReduce(kRing, kSmall, network, 4096, 1024, 64), kRing);
  EXPECT_EQ(ChooseAllReduce(kDoubling, kSmall, network, 64 << 20, 16 << 20, 64), kDoubling);
  EXPECT_EQ(ChooseAllReduce(kRabenseifner, kSmall, shm, 4096, 1024, 2), kRabenseifner);
  EXPECT_EQ(ChooseAllReduce(kRing, kSmall, network, 12, 3, 5), kDoubling);
}

TEST(AllReduceTest, TheModelNeverPrefersTheTreeOnOneKindOfLink) {
  // Why ChooseAllReduce takes the tree only when forced (tree_all_reduce.h).
  for (const LinkConstants& link :
       {LinkConstantsFor("tcp"), LinkConstantsFor("shm"), LinkConstants{2000, 1e-3, 1e-4}}) {
    for (int p = 2; p <= 4096; p = p * 3 / 2 + 1) {
      for (double bytes = 4096; bytes <= (1 << 30); bytes *= 4) {
        double best = HUGE_VAL;
        for (AllReduceAlgorithm a : {kRing, kDoubling, kRabenseifner})
          best = std::min(best, AllReduceTime(a, bytes, p, link));
        EXPECT_GE(AllReduceTime(AllReduceAlgorithm::kTree, bytes, p, link), best)
            << p << " ranks, " << bytes << " bytes";
      }
    }
  }
}

TEST(AllReduceTest, RunsTheChosenAlgorithmExactly) {
  // 6 ranks, 24000 bytes; rank 5 takes no part in the fold, so it sends
  // the ring's 2(n-1)/n of the buffer (40000), Rabenseifner's 2(p-1)/p over
  // the 4-rank core (36000) or recursive doubling's log2(4) buffers (48000).
  constexpr int64_t kCount = 6000;
  struct Case {
    AllReduceAlgorithm forced;
    size_t small;
    uint64_t want;
  };
  // The tree's rank 5 is a leaf: it sends its buffer to its parent once.
  for (const Case& c : {Case{kRing, kSmall, 40000}, Case{kRabenseifner, kSmall, 36000}, Case{kDoubling, 0, 48000},
                        Case{kAuto, size_t{1} << 20, 48000}, Case{AllReduceAlgorithm::kTree, kSmall, 24000}}) {
    AlgorithmRun run;
    run.size = 6;
    run.algorithms.small_message_bytes = c.small;
    run.algorithms.all_reduce = c.forced;
    auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
      Tensor t = RankInput(ctx.rank(), kCount);
      LOCKSTEP_RETURN_IF_ERROR(AllReduce(ctx, t, ReduceOp::kSum));
      LOCKSTEP_RETURN_IF_ERROR(CheckValues(t, [&](int64_t i) { return SumOver(6, i); }));
      if (ctx.rank() != 5) return absl::OkStatus();
      uint64_t sent = 0;
      for (uint64_t b : ctx.transport.Traffic().bytes_sent) sent += b;
      if (sent != c.want) {
        return absl::InternalError(
            absl::StrCat("sent ", sent, " bytes, expected ", c.want, " for ", AllReduceAlgorithmName(c.forced)));
      }
      return absl::OkStatus();
    });
    for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
  }
}

TEST(AllReduceTest, FewerElementsThanRanksTakesRecursiveDoubling) {
  AlgorithmRun run;
  run.size = 5;
  run.algorithms.small_message_bytes = 0;  // Would pick the ring by size.
  auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
    Tensor t = RankInput(ctx.rank(), 3);
    LOCKSTEP_RETURN_IF_ERROR(AllReduce(ctx, t, ReduceOp::kSum));
    return CheckValues(t, [&](int64_t i) { return SumOver(5, i); });
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

TEST(AllReduceTest, AlgorithmNamesRoundTrip) {
  for (AllReduceAlgorithm a : {kAuto, kRing, kDoubling, kRabenseifner, AllReduceAlgorithm::kTree}) {
    absl::StatusOr<AllReduceAlgorithm> parsed = ParseAllReduceAlgorithm(AllReduceAlgorithmName(a));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, a);
  }
  EXPECT_EQ(ParseAllReduceAlgorithm("double_tree").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lockstep
