#include "collectives/cost_model/all_gather_reduce_scatter_cost.h"

#include "gtest/gtest.h"

namespace lockstep {
namespace cost_model {
namespace {

// One host: α = 10, β = 0.01, γ = 0.001.
Level OneHost(int64_t p) {
  Level level;
  level.p = p;
  level.ranks_per_host = p;
  level.local = LinkCost{10, 0.01};
  level.gamma_us_per_byte = 0.001;
  return level;
}

// Two hosts: local α = 10, β = 0.01; remote α = 100, β = 0.1; γ = 0.
Level Hosts(int64_t p, int64_t per_host) {
  Level level;
  level.p = p;
  level.ranks_per_host = per_host;
  level.local = LinkCost{10, 0.01};
  level.remote = LinkCost{100, 0.1};
  return level;
}

TEST(Ring, ByHand) {
  EXPECT_DOUBLE_EQ(RingAllGatherCost(OneHost(4), 400).time_us, 3 * 11);
  EXPECT_DOUBLE_EQ(RingReduceScatterCost(OneHost(4), 400).time_us, 3 * 11.1);
  EXPECT_DOUBLE_EQ(RingAllGatherCost(OneHost(4), 400).bytes, 300);
  EXPECT_DOUBLE_EQ(RingReduceScatterCost(OneHost(3), 300).reduced_bytes, 200);
  EXPECT_DOUBLE_EQ(RingAllGatherCost(OneHost(1), 300).time_us, 0);
}

TEST(RecursiveDoublingAllGather, ByHand) {
  // p = 8, n = 800: 100, 200, 400 B.
  Cost c = RecursiveDoublingAllGatherCost(OneHost(8), 800);
  EXPECT_DOUBLE_EQ(c.time_us, 11 + 12 + 14);
  EXPECT_DOUBLE_EQ(c.bytes, 700);  // (p-1)/p n
  // p = 6 folds to 4: own block (100 B), 150 and 300 B, then all 600 B back.
  c = RecursiveDoublingAllGatherCost(OneHost(6), 600);
  EXPECT_DOUBLE_EQ(c.time_us, 11 + 11.5 + 13 + 16);
  EXPECT_DOUBLE_EQ(c.rounds, 4);
  // Two hosts of 4: the last round (400 B) crosses with 4 flows.
  EXPECT_DOUBLE_EQ(RecursiveDoublingAllGatherCost(Hosts(8, 4), 800).time_us, 11 + 12 + 100 + 0.1 * 400 * 4);
}

TEST(RecursiveHalvingReduceScatter, ByHand) {
  // p = 8, n = 800: 400, 200, 100 B, each reduced.
  Cost c = RecursiveHalvingReduceScatterCost(OneHost(8), 800);
  EXPECT_DOUBLE_EQ(c.time_us, 14.4 + 12.2 + 11.1);
  EXPECT_DOUBLE_EQ(c.bytes, 700);
  EXPECT_DOUBLE_EQ(c.reduced_bytes, 700);
  // p = 6 folds to 4: all 600 B in (16.6), 300 and 150 B, the block (100 B) out.
  c = RecursiveHalvingReduceScatterCost(OneHost(6), 600);
  EXPECT_DOUBLE_EQ(c.time_us, 16.6 + 13.3 + 11.65 + 11);
  EXPECT_DOUBLE_EQ(c.rounds, 4);
  // Two hosts of 4: the first, largest round is at distance 4 and crosses.
  EXPECT_DOUBLE_EQ(RecursiveHalvingReduceScatterCost(Hosts(8, 4), 800).time_us, 100 + 0.1 * 400 * 4 + 12 + 11);
}

TEST(Bruck, ByHand) {
  // p = 5, n = 500: rounds of 1, 2, 1 blocks of 100 B.
  Cost c = BruckAllGatherCost(OneHost(5), 500);
  EXPECT_DOUBLE_EQ(c.time_us, 11 + 12 + 11);
  EXPECT_DOUBLE_EQ(c.rounds, 3);
  EXPECT_DOUBLE_EQ(c.bytes, 400);  // (p-1)/p n
  c = BruckReduceScatterCost(OneHost(5), 500);
  EXPECT_DOUBLE_EQ(c.time_us, 34 + 0.4);
  EXPECT_DOUBLE_EQ(c.reduced_bytes, 400);
  // Two hosts of 4, n = 800: distances 1, 2, 4 with 1, 2, 4 flows of 100, 200, 400 B.
  EXPECT_DOUBLE_EQ(BruckAllGatherCost(Hosts(8, 4), 800).time_us, 110 + 140 + 260);
  EXPECT_DOUBLE_EQ(BruckAllGatherCost(OneHost(1), 800).time_us, 0);
}

TEST(AllGatherReduceScatter, GrowWithBytes) {
  for (const Level& level : {OneHost(2), OneHost(7), Hosts(16, 4), Hosts(18, 3)}) {
    double last[6] = {};
    for (double n : {0.0, 64.0, 4096.0, 1048576.0}) {
      const double now[6] = {RingAllGatherCost(level, n).time_us,
                             RecursiveDoublingAllGatherCost(level, n).time_us,
                             BruckAllGatherCost(level, n).time_us,
                             RingReduceScatterCost(level, n).time_us,
                             RecursiveHalvingReduceScatterCost(level, n).time_us,
                             BruckReduceScatterCost(level, n).time_us};
      for (int i = 0; i < 6; ++i) {
        EXPECT_GE(now[i], last[i]) << i;
        last[i] = now[i];
      }
    }
  }
}

}  // namespace
}  // namespace cost_model
}  // namespace lockstep
