#include "collectives/cost_model/predict.h"

#include <string>
#include <vector>

#include "collectives/cost_model/all_reduce_cost.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace cost_model {
namespace {

constexpr Op kAllOps[] = {Op::kAllReduce, Op::kAllGather, Op::kReduceScatter, Op::kBroadcast,
                          Op::kReduce,    Op::kAllToAll,  Op::kBarrier};

Topology Make(int64_t p, int64_t per_host, int cores = 0) {
  absl::StatusOr<Topology> t = MakeTopology(p, per_host, cores);
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

TEST(Predict, DispatchesToTheFormula) {
  const Topology t = Make(16, 4);
  const CostModel model = DefaultCostModel();
  absl::StatusOr<Cost> ring = Predict(Op::kAllReduce, Algorithm::kRing, 1 << 20, t, model);
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_DOUBLE_EQ(ring->time_us, RingAllReduceCost(FlatLevel(t, model), 1 << 20).time_us);
  absl::StatusOr<Cost> hier = Predict(Op::kAllReduce, Algorithm::kHierarchicalRing, 1 << 20, t, model);
  ASSERT_TRUE(hier.ok());
  EXPECT_DOUBLE_EQ(hier->time_us, HierarchicalAllReduceCost(t, model, Algorithm::kRing, 1 << 20)->time_us);
}

TEST(Predict, EveryAlgorithmOfEveryOpPredicts) {
  const CostModel model = DefaultCostModel();
  for (const Topology& t : {Make(1, 1), Make(2, 2), Make(3, 1), Make(12, 4, 2), Make(16, 8)}) {
    for (Op op : kAllOps) {
      for (Algorithm a : AlgorithmsFor(op)) {
        absl::StatusOr<Cost> c = Predict(op, a, 4096, t, model);
        ASSERT_TRUE(c.ok()) << OpName(op) << " " << AlgorithmName(a) << ": " << c.status();
        EXPECT_GE(c->time_us, 0);
        if (t.p == 1) {
          EXPECT_EQ(c->time_us, 0) << OpName(op) << " " << AlgorithmName(a);
        }
      }
    }
  }
}

TEST(Predict, RefusesBadInputs) {
  const Topology t = Make(8, 4);
  const CostModel model = DefaultCostModel();
  absl::StatusOr<Cost> c = Predict(Op::kAllGather, Algorithm::kRabenseifner, 1, t, model);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("all_gather"), std::string::npos) << c.status();
  EXPECT_NE(c.status().message().find("bruck"), std::string::npos) << c.status();
  EXPECT_FALSE(Predict(Op::kAllReduce, Algorithm::kRing, -1, t, model).ok());
  EXPECT_FALSE(Predict(Op::kAllReduce, Algorithm::kRing, 1, Topology{8, 3, 4, 1}, model).ok());
  CostModel bad = model;
  bad.link(LinkKind::kShm).alpha_us = -1;
  c = Predict(Op::kAllReduce, Algorithm::kRing, 1, t, bad);
  EXPECT_NE(c.status().message().find("links.shm.alpha_us"), std::string::npos) << c.status();
}

TEST(Predict, GrowsWithBytes) {
  const CostModel model = DefaultCostModel();
  for (const Topology& t : {Make(2, 2), Make(5, 5), Make(16, 4, 2), Make(64, 8), Make(96, 3)}) {
    for (Op op : kAllOps) {
      for (Algorithm a : AlgorithmsFor(op)) {
        double last = 0;
        for (int64_t n : {0, 4, 64, 4096, 256 << 10, 16 << 20}) {
          const double now = Predict(op, a, n, t, model)->time_us;
          EXPECT_GE(now, last) << OpName(op) << " " << AlgorithmName(a) << " " << t.Describe() << " " << n;
          last = now;
        }
      }
    }
  }
}

TEST(Choose, PicksTheLeastPredictedTime) {
  const CostModel model = DefaultCostModel();
  for (const Topology& t : {Make(2, 2), Make(16, 2, 2), Make(1024, 8), Make(100000, 10, 10)}) {
    for (Op op : kAllOps) {
      for (int64_t n : {int64_t{4}, int64_t{4096}, int64_t{64} << 20}) {
        absl::StatusOr<Choice> choice = Choose(op, n, t, model);
        ASSERT_TRUE(choice.ok()) << choice.status();
        for (Algorithm a : AlgorithmsFor(op)) {
          EXPECT_LE(choice->cost.time_us, Predict(op, a, n, t, model)->time_us)
              << OpName(op) << " " << AlgorithmName(a) << " " << t.Describe();
        }
      }
    }
  }
}

TEST(Choose, BreaksTiesByTheEnumOrder) {
  // Two ranks: the ring, recursive doubling and Bruck all-gathers are one
  // identical round of n/2.
  const Topology t = Make(2, 2);
  const CostModel model = DefaultCostModel();
  EXPECT_EQ(Predict(Op::kAllGather, Algorithm::kRing, 4096, t, model)->time_us,
            Predict(Op::kAllGather, Algorithm::kBruck, 4096, t, model)->time_us);
  EXPECT_EQ(Choose(Op::kAllGather, 4096, t, model)->algorithm, Algorithm::kRing);
  // The allowed list's order does not matter: the enum's does.
  const std::vector<Algorithm> allowed = {Algorithm::kBruck, Algorithm::kRecursiveDoubling};
  EXPECT_EQ(Choose(Op::kAllGather, 4096, t, model, allowed)->algorithm, Algorithm::kRecursiveDoubling);
  // Everything free: every all-reduce costs 0; the first wins.
  EXPECT_EQ(Choose(Op::kAllReduce, 4096, Make(8, 4), CostModel{})->algorithm, Algorithm::kRing);
}

TEST(Choose, HonoursAllowedAndRefusesForeignAlgorithms) {
  const Topology t = Make(64, 8);
  const CostModel model = DefaultCostModel();
  const std::vector<Algorithm> only_ring = {Algorithm::kRing};
  EXPECT_EQ(Choose(Op::kAllReduce, 4, t, model, only_ring)->algorithm, Algorithm::kRing);
  const std::vector<Algorithm> foreign = {Algorithm::kPairwise};
  EXPECT_EQ(Choose(Op::kAllReduce, 4, t, model, foreign).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(Choose(Op::kAllReduce, -4, t, model).ok());
}

TEST(TodaysChoice, FollowsTodaysCode) {
  // One host (shared memory) or one rank per host (TCP): flat.
  EXPECT_EQ(*TodaysChoice(Op::kAllReduce, 4096, Make(2, 2)), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(*TodaysChoice(Op::kAllReduce, (256 << 10) - 1, Make(16, 1)), Algorithm::kRecursiveDoubling);
  // Above it, over TCP, a power of two takes Rabenseifner's; 17 ranks, 1 MiB:
  // folding costs more than the ring's extra steps.
  EXPECT_EQ(*TodaysChoice(Op::kAllReduce, 256 << 10, Make(16, 1)), Algorithm::kRabenseifner);
  EXPECT_EQ(*TodaysChoice(Op::kAllReduce, 1 << 20, Make(17, 1)), Algorithm::kRing);
  // One host (shared memory): a step costs ~1 µs, the ring's overlap wins.
  EXPECT_EQ(*TodaysChoice(Op::kAllReduce, 1 << 20, Make(4, 4)), Algorithm::kRing);
  // Fewer f32 elements than ranks: recursive doubling even above 256 KiB.
  EXPECT_EQ(*TodaysChoice(Op::kAllReduce, 300 << 10, Make(100000, 1)), Algorithm::kRecursiveDoubling);
  // Several hosts of several ranks: hierarchical, the rule applied among the leaders.
  EXPECT_EQ(*TodaysChoice(Op::kAllReduce, 4096, Make(1024, 8)), Algorithm::kHierarchicalRecursiveDoubling);
  EXPECT_EQ(*TodaysChoice(Op::kAllReduce, 64 << 20, Make(1024, 8)), Algorithm::kHierarchicalRabenseifner);
  EXPECT_EQ(*TodaysChoice(Op::kAllReduce, 64 << 20, Make(24, 8)), Algorithm::kHierarchicalRing);
  EXPECT_EQ(*TodaysChoice(Op::kBroadcast, 1, Make(1024, 8)), Algorithm::kHierarchicalBinomialTree);
  EXPECT_EQ(*TodaysChoice(Op::kReduce, 1, Make(16, 1)), Algorithm::kBinomialTree);
  EXPECT_EQ(*TodaysChoice(Op::kBarrier, 0, Make(1024, 8)), Algorithm::kHierarchicalDissemination);
  EXPECT_EQ(*TodaysChoice(Op::kBarrier, 0, Make(8, 8)), Algorithm::kDissemination);
  EXPECT_EQ(*TodaysChoice(Op::kAllGather, 1, Make(1024, 8)), Algorithm::kBruck);
  EXPECT_EQ(*TodaysChoice(Op::kReduceScatter, 1, Make(1024, 8)), Algorithm::kRecursiveHalving);
  EXPECT_EQ(*TodaysChoice(Op::kAllGather, 64 << 20, Make(4, 4)), Algorithm::kRing);
  // 8 ranks behind each host's link: the ring from ~550 KB (the lab's 8 x 8).
  EXPECT_EQ(*TodaysChoice(Op::kAllGather, 256 << 10, Make(64, 8)), Algorithm::kBruck);
  EXPECT_EQ(*TodaysChoice(Op::kAllGather, 1 << 20, Make(64, 8)), Algorithm::kRing);
  EXPECT_EQ(*TodaysChoice(Op::kReduceScatter, 1 << 20, Make(64, 8)), Algorithm::kRing);
  EXPECT_EQ(*TodaysChoice(Op::kReduceScatter, 64 << 20, Make(4, 4)), Algorithm::kRing);
  // All-to-all: Bruck's log2 p messages for small blocks, pairwise for
  // large ones and few ranks.
  EXPECT_EQ(*TodaysChoice(Op::kAllToAll, 1, Make(1024, 8)), Algorithm::kBruck);
  EXPECT_EQ(*TodaysChoice(Op::kAllToAll, 4096, Make(64, 8)), Algorithm::kBruck);
  EXPECT_EQ(*TodaysChoice(Op::kAllToAll, 64 << 20, Make(64, 8)), Algorithm::kPairwise);
  EXPECT_EQ(*TodaysChoice(Op::kAllToAll, 4096, Make(3, 1)), Algorithm::kPairwise);
  // Broadcast and reduce over a flat group: the pipelined tree for large
  // buffers over many ranks.
  EXPECT_EQ(*TodaysChoice(Op::kBroadcast, 64 << 20, Make(64, 1)), Algorithm::kPipelinedTree);
  EXPECT_EQ(*TodaysChoice(Op::kReduce, 64 << 20, Make(64, 1)), Algorithm::kPipelinedTree);
  EXPECT_EQ(*TodaysChoice(Op::kBroadcast, 4096, Make(64, 1)), Algorithm::kBinomialTree);
  TodaysRules rules;
  rules.small_message_bytes = 1 << 20;
  EXPECT_EQ(*TodaysChoice(Op::kAllReduce, 512 << 10, Make(2, 2), rules), Algorithm::kRecursiveDoubling);
  EXPECT_FALSE(TodaysChoice(Op::kAllReduce, -1, Make(2, 2)).ok());
  // What today's code runs is always an algorithm the model knows.
  for (Op op : kAllOps) {
    for (const Topology& t : {Make(1, 1), Make(8, 8), Make(8, 1), Make(64, 8)}) {
      EXPECT_TRUE(Supports(op, *TodaysChoice(op, 4096, t))) << OpName(op);
    }
  }
}

TEST(Predict, ForcedTcpUsesLoopbackTcpOnOneHost) {
  CostModel model;
  model.link(LinkKind::kShm) = LinkCost{1, 0};
  model.link(LinkKind::kTcpLocal) = LinkCost{10, 0};
  PredictOptions tcp;
  tcp.transport = FlatTransport::kTcp;
  const Topology t = Make(8, 8);
  EXPECT_DOUBLE_EQ(Predict(Op::kAllReduce, Algorithm::kRecursiveDoubling, 4096, t, model)->time_us, 3);
  EXPECT_DOUBLE_EQ(Predict(Op::kAllReduce, Algorithm::kRecursiveDoubling, 4096, t, model, tcp)->time_us, 30);
  const std::vector<Algorithm> only = {Algorithm::kRecursiveDoubling};
  EXPECT_DOUBLE_EQ(Choose(Op::kAllReduce, 4096, t, model, only, tcp)->cost.time_us, 30);
  // Forced TCP is never hierarchical today.
  TodaysRules rules;
  rules.transport = FlatTransport::kTcp;
  EXPECT_EQ(*TodaysChoice(Op::kAllReduce, 4096, Make(64, 8), rules), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(*TodaysChoice(Op::kBarrier, 0, Make(64, 8), rules), Algorithm::kDissemination);
}

TEST(Predict, CpuTermReproducesTheLabsOversubscribedRun) {
  // 4 KiB all-reduce over loopback TCP: ~11 µs at 2 ranks on 2 cores, ~1.1 ms
  // at 16 ranks on 2 cores (collectives/cost_model/cost_model.h).
  CostModel model;
  model.link(LinkKind::kTcpLocal) = LinkCost{10, 0.00025};  // 10 + 4096 * 0.00025 = 11.024 µs
  model.cpu_us_per_round = 38;
  PredictOptions tcp;
  tcp.transport = FlatTransport::kTcp;
  EXPECT_DOUBLE_EQ(Predict(Op::kAllReduce, Algorithm::kRecursiveDoubling, 4096, Make(2, 2, 2), model, tcp)->time_us,
                   11.024);
  // 4 rounds, each 11.024 + 38 * (16 / 2 - 1).
  EXPECT_DOUBLE_EQ(Predict(Op::kAllReduce, Algorithm::kRecursiveDoubling, 4096, Make(16, 16, 2), model, tcp)->time_us,
                   4 * (11.024 + 38 * 7));
}

TEST(Names, RoundTrip) {
  for (Op op : kAllOps) {
    EXPECT_EQ(*ParseOp(OpName(op)), op);
    for (Algorithm a : AlgorithmsFor(op)) EXPECT_EQ(*ParseAlgorithm(AlgorithmName(a)), a);
  }
  EXPECT_FALSE(ParseOp("allreduce").ok());
  EXPECT_NE(ParseAlgorithm("rign").status().message().find("ring"), std::string::npos);
}

}  // namespace
}  // namespace cost_model
}  // namespace lockstep
