#include "collectives/cost_model/all_to_all_cost.h"

#include "gtest/gtest.h"

namespace lockstep {
namespace cost_model {
namespace {

// Hosts of `per_host`: local α = 10, β = 0.01; remote α = 100, β = 0.1.
Level Hosts(int64_t p, int64_t per_host) {
  Level level;
  level.p = p;
  level.ranks_per_host = per_host;
  level.local = LinkCost{10, 0.01};
  level.remote = LinkCost{100, 0.1};
  return level;
}

TEST(PairwiseAllToAll, ByHand) {
  // One host, p = 4, blocks of 100 B (small): the 3 steps in one window,
  // one α and 300 B: 10 + 0.01*300.
  Cost c = PairwiseAllToAllCost(Hosts(4, 4), 400);
  EXPECT_DOUBLE_EQ(c.time_us, 13);
  EXPECT_DOUBLE_EQ(c.rounds, 1);
  EXPECT_DOUBLE_EQ(c.bytes, 300);
  // Two hosts of 4, blocks of 100 B: step s sends min(4, s, 8 - s) blocks
  // across per host, 1+2+3+4+3+2+1 = 16 in the one window: 100 + 0.1*1600
  // (more than the 10 + 0.01*700 inside).
  EXPECT_DOUBLE_EQ(PairwiseAllToAllCost(Hosts(8, 4), 800).time_us, 100 + 160);
  // Blocks above small_message_bytes: windows of 4 steps, {1..4} (10 blocks
  // across) and {5..7} (6 blocks).
  c = PairwiseAllToAllCost(Hosts(8, 4), 800, /*small_message_bytes=*/50);
  EXPECT_DOUBLE_EQ(c.time_us, (100 + 100) + (100 + 60));
  EXPECT_DOUBLE_EQ(c.rounds, 2);
  EXPECT_DOUBLE_EQ(c.bytes, 700);
  EXPECT_DOUBLE_EQ(PairwiseAllToAllCost(Hosts(1, 1), 800).time_us, 0);
}

TEST(BruckAllToAll, ByHand) {
  // p = 5, blocks of 100 B: bit 0 of 1, 3; bit 1 of 2, 3; bit 2 of 4.
  Cost c = BruckAllToAllCost(Hosts(5, 5), 500);
  EXPECT_DOUBLE_EQ(c.time_us, 12 + 12 + 11);
  EXPECT_DOUBLE_EQ(c.bytes, 500);
  // p = 8: 4 blocks every round.
  EXPECT_DOUBLE_EQ(BruckAllToAllCost(Hosts(8, 8), 800).bytes, 3 * 400);
}

TEST(DisseminationBarrier, ByHand) {
  EXPECT_DOUBLE_EQ(DisseminationBarrierCost(Hosts(5, 5)).time_us, 30);
  EXPECT_DOUBLE_EQ(DisseminationBarrierCost(Hosts(8, 4)).time_us, 300);  // every round crosses
  EXPECT_DOUBLE_EQ(DisseminationBarrierCost(Hosts(1, 1)).time_us, 0);
  CostModel model;
  model.link(LinkKind::kShm) = LinkCost{1, 0};
  model.link(LinkKind::kTcpRemote) = LinkCost{100, 0};
  EXPECT_DOUBLE_EQ(HierarchicalDisseminationBarrierCost(Topology{8, 2, 4, 4}, model).time_us, 2 + 100 + 2);
}

TEST(AllToAll, GrowsWithBytes) {
  for (const Level& level : {Hosts(2, 2), Hosts(7, 7), Hosts(16, 4), Hosts(15, 3)}) {
    double pairwise = 0, bruck = 0;
    for (double n : {0.0, 64.0, 4096.0, 1048576.0}) {
      EXPECT_GE(PairwiseAllToAllCost(level, n).time_us, pairwise);
      EXPECT_GE(BruckAllToAllCost(level, n).time_us, bruck);
      pairwise = PairwiseAllToAllCost(level, n).time_us;
      bruck = BruckAllToAllCost(level, n).time_us;
    }
  }
}

}  // namespace
}  // namespace cost_model
}  // namespace lockstep
