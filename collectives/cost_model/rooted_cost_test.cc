#include "collectives/cost_model/rooted_cost.h"

#include <algorithm>
#include <limits>

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

TEST(BinomialTree, ByHand) {
  // p = 5: ceil(log2 5) = 3 rounds of all 100 B.
  EXPECT_DOUBLE_EQ(BinomialTreeCost(OneHost(5), Direction::kBroadcast, 100).time_us, 33);
  Cost reduce = BinomialTreeCost(OneHost(5), Direction::kReduce, 100);
  EXPECT_DOUBLE_EQ(reduce.time_us, 33.3);
  EXPECT_DOUBLE_EQ(reduce.rounds, 3);
  EXPECT_DOUBLE_EQ(reduce.reduced_bytes, 300);
  EXPECT_DOUBLE_EQ(BinomialTreeCost(OneHost(1), Direction::kBroadcast, 100).time_us, 0);
  // Two hosts of 4 over TCP: distances 1 and 2 inside, 4 across with 4 senders.
  Level hosts = OneHost(8);
  hosts.ranks_per_host = 4;
  hosts.remote = LinkCost{100, 0.1};
  hosts.gamma_us_per_byte = 0;
  EXPECT_DOUBLE_EQ(BinomialTreeCost(hosts, Direction::kBroadcast, 100).time_us, 11 + 11 + 100 + 0.1 * 100 * 4);
}

TEST(PipelinedChain, ByHand) {
  // p = 4, 2 chunks of 100 B: 3 + 1 steps.
  Cost c = PipelinedChainCost(OneHost(4), Direction::kBroadcast, 200, 2);
  EXPECT_DOUBLE_EQ(c.time_us, 44);
  EXPECT_DOUBLE_EQ(c.rounds, 4);
  EXPECT_DOUBLE_EQ(PipelinedChainCost(OneHost(4), Direction::kReduce, 200, 2).time_us, 44.4);
  EXPECT_DOUBLE_EQ(PipelinedChainCost(OneHost(1), Direction::kReduce, 200, 2).time_us, 0);
}

TEST(PipelinedTree, ByHand) {
  // p = 7: depth 2, fan 2; 4 chunks of 100 B: 5 steps moving 200 B.
  EXPECT_DOUBLE_EQ(PipelinedTreeCost(OneHost(7), Direction::kBroadcast, 400, 4).time_us, 60);
  EXPECT_DOUBLE_EQ(PipelinedTreeCost(OneHost(7), Direction::kReduce, 400, 4).time_us, 61);
  // p = 2: one child.
  EXPECT_DOUBLE_EQ(PipelinedTreeCost(OneHost(2), Direction::kBroadcast, 400, 1).time_us, 14);
}

TEST(Pipelined, BestChunkCountIsTheMinimumOverAllCounts) {
  for (int64_t p : {2, 3, 4, 8, 16}) {
    const double n = 64 * 200;
    double chain = std::numeric_limits<double>::infinity(), tree = chain;
    for (int64_t k = 1; k <= 200; ++k) {
      chain = std::min(chain, PipelinedChainCost(OneHost(p), Direction::kBroadcast, n, k).time_us);
      tree = std::min(tree, PipelinedTreeCost(OneHost(p), Direction::kReduce, n, k).time_us);
    }
    EXPECT_DOUBLE_EQ(PipelinedChainCost(OneHost(p), Direction::kBroadcast, n, 0).time_us, chain) << p;
    EXPECT_DOUBLE_EQ(PipelinedTreeCost(OneHost(p), Direction::kReduce, n, 0).time_us, tree) << p;
  }
}

TEST(HierarchicalBinomialTree, ComposesHostsAndLeaders) {
  CostModel model;
  model.link(LinkKind::kShm) = LinkCost{1, 0.001};
  model.link(LinkKind::kTcpRemote) = LinkCost{100, 0.1};
  const Topology t{8, 2, 4, 4};
  // Inside a host: 2 rounds of 1 + 1; among the 2 leaders: 100 + 100.
  EXPECT_DOUBLE_EQ(HierarchicalBinomialTreeCost(t, model, Direction::kBroadcast, 1000).time_us, 4 + 200 + 4);
  EXPECT_DOUBLE_EQ(HierarchicalBinomialTreeCost(t, model, Direction::kReduce, 1000).time_us, 4 + 200);
  EXPECT_DOUBLE_EQ(HierarchicalBinomialTreeCost(Topology{4, 1, 4, 4}, model, Direction::kBroadcast, 1000).time_us, 4);
}

TEST(Rooted, GrowsWithBytes) {
  for (int64_t p : {2, 3, 9, 16}) {
    double last[3] = {};
    for (double n : {0.0, 64.0, 4096.0, 1048576.0}) {
      const double now[3] = {BinomialTreeCost(OneHost(p), Direction::kReduce, n).time_us,
                             PipelinedChainCost(OneHost(p), Direction::kReduce, n, 0).time_us,
                             PipelinedTreeCost(OneHost(p), Direction::kBroadcast, n, 0).time_us};
      for (int i = 0; i < 3; ++i) {
        EXPECT_GE(now[i], last[i]) << i;
        last[i] = now[i];
      }
    }
  }
}

}  // namespace
}  // namespace cost_model
}  // namespace lockstep
