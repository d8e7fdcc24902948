#include "collectives/cost_model/all_reduce_cost.h"

#include <algorithm>
#include <limits>

#include "gtest/gtest.h"

namespace lockstep {
namespace cost_model {
namespace {

// One host: α = 10, β = 0.01, γ = 0.001, no CPU term.
Level OneHost(int64_t p) {
  Level level;
  level.p = p;
  level.ranks_per_host = p;
  level.local = LinkCost{10, 0.01};
  level.remote = LinkCost{1e9, 1e9};  // never used
  level.gamma_us_per_byte = 0.001;
  return level;
}

// Hosts of `per_host` ranks: local α = 10, β = 0.01; remote α = 100, β = 0.1; γ = 0.
Level Hosts(int64_t p, int64_t per_host) {
  Level level;
  level.p = p;
  level.ranks_per_host = per_host;
  level.local = LinkCost{10, 0.01};
  level.remote = LinkCost{100, 0.1};
  return level;
}

TEST(RingAllReduce, ByHand) {
  // p = 4, n = 400: 6 rounds of 100 B (10 + 1), 3 of them reducing 100 B (0.1).
  Cost c = RingAllReduceCost(OneHost(4), 400);
  EXPECT_DOUBLE_EQ(c.time_us, 66.3);
  EXPECT_DOUBLE_EQ(c.rounds, 6);
  EXPECT_DOUBLE_EQ(c.bytes, 600);  // 2(p-1)/p n
  EXPECT_DOUBLE_EQ(c.reduced_bytes, 300);
  // p = 3, n = 300: 4 rounds of 100 B, 2 reducing.
  EXPECT_DOUBLE_EQ(RingAllReduceCost(OneHost(3), 300).time_us, 44.2);
  EXPECT_DOUBLE_EQ(RingAllReduceCost(OneHost(1), 300).time_us, 0);
  // Two hosts of 4, n = 800: a pipeline of 14 steps of 100 B whose longest
  // chain crosses hosts ceil(14 / 4) = 4 times (α 100) and stays inside 10
  // times (α 10); every step moves its block over the remote link (0.1*100).
  c = RingAllReduceCost(Hosts(8, 4), 800);
  EXPECT_DOUBLE_EQ(c.time_us, 4 * 100 + 10 * 10 + 14 * 10);
  EXPECT_DOUBLE_EQ(c.rounds, 14);
  // One rank per host: every edge crosses, 14 remote hops.
  EXPECT_DOUBLE_EQ(RingAllReduceCost(Hosts(8, 1), 800).time_us, 14 * (100 + 10));
}

TEST(RecursiveDoublingAllReduce, ByHand) {
  // p = 8: 3 rounds of all 1000 B, each reduced: 10 + 10 + 1.
  Cost c = RecursiveDoublingAllReduceCost(OneHost(8), 1000);
  EXPECT_DOUBLE_EQ(c.time_us, 63);
  EXPECT_DOUBLE_EQ(c.rounds, 3);
  EXPECT_DOUBLE_EQ(c.bytes, 3000);
  EXPECT_DOUBLE_EQ(RecursiveDoublingAllReduceCost(OneHost(2), 1000).time_us, 21);
  // p = 3 folds to 2: fold (21) + 1 round (21) + unfold (20).
  c = RecursiveDoublingAllReduceCost(OneHost(3), 1000);
  EXPECT_DOUBLE_EQ(c.time_us, 62);
  EXPECT_DOUBLE_EQ(c.rounds, 3);
  EXPECT_DOUBLE_EQ(c.bytes, 3000);
  EXPECT_DOUBLE_EQ(c.reduced_bytes, 2000);
  // p = 12 folds to 8: 3 + 2 rounds.
  EXPECT_DOUBLE_EQ(RecursiveDoublingAllReduceCost(OneHost(12), 1000).rounds, 5);
  // Two hosts of 4, n = 800: distances 1 and 2 stay inside (18 each), 4
  // crosses with all 4 ranks of a host at once: 100 + 0.1*800*4.
  EXPECT_DOUBLE_EQ(RecursiveDoublingAllReduceCost(Hosts(8, 4), 800).time_us, 18 + 18 + 420);
}

TEST(RabenseifnerAllReduce, ByHand) {
  // p = 4, n = 400: halving 200 B (12.2), 100 B (11.1); doubling 100 B (11), 200 B (12).
  Cost c = RabenseifnerAllReduceCost(OneHost(4), 400);
  EXPECT_DOUBLE_EQ(c.time_us, 46.3);
  EXPECT_DOUBLE_EQ(c.rounds, 4);
  EXPECT_DOUBLE_EQ(c.bytes, 600);  // 2(p-1)/p n
  EXPECT_DOUBLE_EQ(c.reduced_bytes, 300);
  // p = 6 folds to 4: + fold of 400 B (14.4) + unfold (14).
  c = RabenseifnerAllReduceCost(OneHost(6), 400);
  EXPECT_DOUBLE_EQ(c.time_us, 14.4 + 46.3 + 14);
  EXPECT_DOUBLE_EQ(c.rounds, 6);
  EXPECT_DOUBLE_EQ(c.bytes, 1400);
  // Two hosts of 4, n = 800: the big halves stay inside, 100 B cross x4.
  EXPECT_DOUBLE_EQ(RabenseifnerAllReduceCost(Hosts(8, 4), 800).time_us, 2 * (14 + 12 + 140));
}

TEST(TreeAllReduce, ByHandWithChunks) {
  // p = 4: depth 2, fan 2; 2 chunks of 200 B: 3 steps up (10 + 4 + 0.4)
  // and 3 down (10 + 4).
  Cost c = BinaryTreeAllReduceCost(OneHost(4), 400, 2);
  EXPECT_DOUBLE_EQ(c.time_us, 3 * 28.4);
  EXPECT_DOUBLE_EQ(c.rounds, 6);
  EXPECT_DOUBLE_EQ(c.bytes, 2400);
  EXPECT_DOUBLE_EQ(c.reduced_bytes, 1200);
  // Two trees, half a chunk each per edge: 200 B per step.
  c = DoubleBinaryTreeAllReduceCost(OneHost(4), 400, 2);
  EXPECT_DOUBLE_EQ(c.time_us, 3 * 24.2);
  EXPECT_DOUBLE_EQ(c.bytes, 1200);
  // p = 2: one child, depth 1, one chunk: up 10 + 1 + 0.1, down 11.
  EXPECT_DOUBLE_EQ(BinaryTreeAllReduceCost(OneHost(2), 100, 1).time_us, 22.1);
  // p = 3: depth 1, fan 2.
  EXPECT_DOUBLE_EQ(BinaryTreeAllReduceCost(OneHost(3), 100, 1).time_us, 12.2 + 12);
  EXPECT_DOUBLE_EQ(BinaryTreeAllReduceCost(OneHost(1), 100, 0).time_us, 0);
}

TEST(TreeAllReduce, BestChunkCountIsTheMinimumOverAllCounts) {
  for (int64_t p : {2, 3, 5, 8, 16}) {
    const double n = 64 * 300;  // MaxChunks: 300
    double best = std::numeric_limits<double>::infinity();
    for (int64_t k = 1; k <= 300; ++k) best = std::min(best, DoubleBinaryTreeAllReduceCost(OneHost(p), n, k).time_us);
    EXPECT_DOUBLE_EQ(DoubleBinaryTreeAllReduceCost(OneHost(p), n, 0).time_us, best) << "p=" << p;
  }
}

TEST(AllReduce, GrowsWithBytes) {
  for (const Level& level : {OneHost(2), OneHost(3), OneHost(16), Hosts(16, 4), Hosts(24, 3), Hosts(12, 1)}) {
    double last[5] = {};
    for (double n : {0.0, 64.0, 4096.0, 1048576.0, 64.0 * 1048576.0}) {
      const double now[5] = {RingAllReduceCost(level, n).time_us, RecursiveDoublingAllReduceCost(level, n).time_us,
                             RabenseifnerAllReduceCost(level, n).time_us, BinaryTreeAllReduceCost(level, n, 0).time_us,
                             DoubleBinaryTreeAllReduceCost(level, n, 0).time_us};
      for (int i = 0; i < 5; ++i) {
        EXPECT_GE(now[i], last[i]) << "algorithm " << i << " p=" << level.p << " n=" << n;
        last[i] = now[i];
      }
    }
  }
}

TEST(AllReduce, RingAndRecursiveDoublingGrowWithPowersOfTwo) {
  double ring = 0, doubling = 0;
  for (int64_t p = 2; p <= 1024; p *= 2) {
    EXPECT_GT(RingAllReduceCost(OneHost(p), 1 << 20).time_us, ring);
    EXPECT_GT(RecursiveDoublingAllReduceCost(OneHost(p), 1 << 20).time_us, doubling);
    ring = RingAllReduceCost(OneHost(p), 1 << 20).time_us;
    doubling = RecursiveDoublingAllReduceCost(OneHost(p), 1 << 20).time_us;
  }
}

TEST(HierarchicalAllReduce, ComposesIntraHostAndLeaderPhases) {
  CostModel model;
  model.link(LinkKind::kShm) = LinkCost{1, 0.001};
  model.link(LinkKind::kTcpLocal) = LinkCost{1e6, 1};  // not used by the hierarchy
  model.link(LinkKind::kTcpRemote) = LinkCost{100, 0.1};
  Topology t{8, 2, 4, 4};
  // Reduce inside: 2 rounds of 1 + 1; leaders' recursive doubling on 2: 100 + 100; broadcast: 2 rounds.
  absl::StatusOr<Cost> c = HierarchicalAllReduceCost(t, model, Algorithm::kRecursiveDoubling, 1000);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->time_us, 4 + 200 + 4);
  EXPECT_DOUBLE_EQ(c->rounds, 5);
  // 2 cores for 4 ranks: c = 10 adds 10 * (4/2 - 1) to each intra-host round, none among leaders.
  model.cpu_us_per_round = 10;
  t.cores_per_host = 2;
  c = HierarchicalAllReduceCost(t, model, Algorithm::kRing, 1000);
  ASSERT_TRUE(c.ok());
  EXPECT_DOUBLE_EQ(c->time_us, 4 * (2 + 10) + 2 * (100 + 0.1 * 500));
  // One host: no leaders' phase. One rank per host: no intra-host phase.
  c = HierarchicalAllReduceCost(Topology{4, 1, 4, 4}, model, Algorithm::kRing, 1000);
  ASSERT_TRUE(c.ok());
  EXPECT_DOUBLE_EQ(c->time_us, 4 + 4);
  c = HierarchicalAllReduceCost(Topology{2, 2, 1, 1}, model, Algorithm::kRabenseifner, 1000);
  ASSERT_TRUE(c.ok());
  EXPECT_DOUBLE_EQ(c->time_us, 2 * (100 + 0.1 * 500));
}

TEST(HierarchicalAllReduce, RefusesAnInnerAlgorithmThatIsNotAnAllReduce) {
  absl::StatusOr<Cost> c = HierarchicalAllReduceCost(Topology{8, 2, 4, 4}, CostModel{}, Algorithm::kPairwise, 1000);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("pairwise"), std::string::npos);
}

}  // namespace
}  // namespace cost_model
}  // namespace lockstep
