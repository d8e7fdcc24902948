#include "collectives/cost_model/step_cost.h"

#include <cmath>

#include "gtest/gtest.h"

namespace lockstep {
namespace cost_model {
namespace {

Level TwoKinds(int64_t p, int64_t per_host) {
  Level level;
  level.p = p;
  level.ranks_per_host = per_host;
  level.local = LinkCost{10, 0.5};
  level.remote = LinkCost{100, 1};
  level.gamma_us_per_byte = 0.25;
  level.cpu_us_per_round = 3;
  return level;
}

TEST(RoundTime, LocalRoundIsAlphaBetaGammaAndCpu) {
  // 10 + 0.5*4 + 0.25*2 + 3
  EXPECT_DOUBLE_EQ(RoundTime(TwoKinds(4, 4), Round{4, 2, 0, true}), 15.5);
}

TEST(RoundTime, RemoteFlowsShareTheHostLinkAndTheSlowestLinkWins) {
  // max(10 + 0.5*4, 100 + 1*4*3) + 0 + 3
  EXPECT_DOUBLE_EQ(RoundTime(TwoKinds(8, 4), Round{4, 0, 3, true}), 115);
  // Remote only.
  EXPECT_DOUBLE_EQ(RoundTime(TwoKinds(8, 4), Round{4, 0, 1, false}), 107);
  // A local link slower than the remote one sets the round's time.
  Level slow_local = TwoKinds(8, 4);
  slow_local.local = LinkCost{1000, 0};
  EXPECT_DOUBLE_EQ(RoundTime(slow_local, Round{4, 0, 1, true}), 1003);
}

TEST(AddRounds, MultipliesEveryQuantity) {
  Cost cost;
  AddRounds(TwoKinds(4, 4), Round{4, 2, 0, true}, 3, &cost);
  EXPECT_DOUBLE_EQ(cost.time_us, 46.5);
  EXPECT_DOUBLE_EQ(cost.rounds, 3);
  EXPECT_DOUBLE_EQ(cost.bytes, 12);
  EXPECT_DOUBLE_EQ(cost.reduced_bytes, 6);
  AddRounds(TwoKinds(4, 4), Round{4, 2, 0, true}, 0, &cost);
  EXPECT_DOUBLE_EQ(cost.rounds, 3);
}

TEST(RoundTime, HostRemoteBytesReplaceBytesTimesFlows) {
  // max(10 + 0.5*4, 100 + 1*10) + 0 + 3
  Round round{4, 0, 3, true};
  round.host_remote_bytes = 10;
  EXPECT_DOUBLE_EQ(RoundTime(TwoKinds(8, 4), round), 113);
}

TEST(RoundTime, AFabricChargesEverySendingHostsBytesTogether) {
  // 8 ranks, 2 hosts of 4: 3 flows of 4 bytes from each host. Own links:
  // 100 + 1*4*3 = 112; a fabric of 2 us/byte: 100 + 2*4*3*2 = 148.
  Level level = TwoKinds(8, 4);
  level.fabric_us_per_byte = 2;
  EXPECT_DOUBLE_EQ(RoundTime(level, Round{4, 0, 3, false}), 148 + 3);
  // Only one host sends: 100 + 2*4*3*1 = 124.
  Round one{4, 0, 3, false};
  one.sending_hosts = 1;
  EXPECT_DOUBLE_EQ(RoundTime(level, one), 124 + 3);
  // A fabric faster than the hosts' links together changes nothing.
  level.fabric_us_per_byte = 0.25;
  EXPECT_DOUBLE_EQ(RoundTime(level, Round{4, 0, 3, false}), 112 + 3);
}

TEST(AddRingChain, LatenciesAddAlongTheChainBandwidthPerStep) {
  // 8 ranks, 2 per host, 7 steps of 4 B reducing 2: the longest chain of 7
  // edges crosses ceil(7/2) = 4 times; each step moves 4 B over the slower
  // edge (max(0.5*4, 1*4) = 4), reduces 2 (0.25*2) and pays the CPU term 3.
  Cost cost;
  AddRingChain(TwoKinds(8, 2), ShiftRound(TwoKinds(8, 2), 1, 4, 2), 7, &cost);
  EXPECT_DOUBLE_EQ(cost.time_us, 4 * 100 + 3 * 10 + 7 * (4 + 0.5 + 3));
  EXPECT_DOUBLE_EQ(cost.rounds, 7);
  EXPECT_DOUBLE_EQ(cost.bytes, 28);
  EXPECT_DOUBLE_EQ(cost.reduced_bytes, 14);
  // One rank per host or one host: every edge alike, the lock-step sum.
  for (const Level& level : {TwoKinds(8, 1), TwoKinds(8, 8)}) {
    Cost chain, rounds;
    AddRingChain(level, ShiftRound(level, 1, 4, 2), 7, &chain);
    AddRounds(level, ShiftRound(level, 1, 4, 2), 7, &rounds);
    EXPECT_DOUBLE_EQ(chain.time_us, rounds.time_us);
  }
  // Never more than the lock-step sum.
  Cost chain, rounds;
  AddRingChain(TwoKinds(16, 4), ShiftRound(TwoKinds(16, 4), 1, 4, 0), 30, &chain);
  AddRounds(TwoKinds(16, 4), ShiftRound(TwoKinds(16, 4), 1, 4, 0), 30, &rounds);
  EXPECT_LT(chain.time_us, rounds.time_us);
}

TEST(CpuPerRound, OnlyWhenRanksOutnumberCores) {
  EXPECT_DOUBLE_EQ(CpuPerRound(38, 2, 2), 0);
  EXPECT_DOUBLE_EQ(CpuPerRound(38, 1, 8), 0);
  EXPECT_DOUBLE_EQ(CpuPerRound(38, 3, 2), 19);
  EXPECT_DOUBLE_EQ(CpuPerRound(38, 16, 2), 38 * 7);
}

TEST(ShiftRound, FlowsAcrossHosts) {
  const Level level = TwoKinds(8, 4);
  EXPECT_EQ(ShiftRound(level, 1, 1, 0).remote_flows, 1);
  EXPECT_TRUE(ShiftRound(level, 1, 1, 0).local);
  EXPECT_EQ(ShiftRound(level, 3, 1, 0).remote_flows, 3);
  EXPECT_EQ(ShiftRound(level, 4, 1, 0).remote_flows, 4);
  EXPECT_FALSE(ShiftRound(level, 4, 1, 0).local);
  EXPECT_EQ(ShiftRound(level, 6, 1, 0).remote_flows, 2);  // wraps: 6 == -2
  EXPECT_EQ(ShiftRound(level, 9, 1, 0).remote_flows, 1);  // mod p
  EXPECT_EQ(ShiftRound(TwoKinds(8, 8), 3, 1, 0).remote_flows, 0);
  EXPECT_EQ(ShiftRound(TwoKinds(3, 1), 1, 1, 0).remote_flows, 1);
  EXPECT_FALSE(ShiftRound(TwoKinds(3, 1), 1, 1, 0).local);
}

TEST(XorRound, InsideAlignedHostsAcrossBeyondThem) {
  const Level level = TwoKinds(16, 4);
  EXPECT_EQ(XorRound(level, 1, 1, 0).remote_flows, 0);
  EXPECT_EQ(XorRound(level, 2, 1, 0).remote_flows, 0);
  EXPECT_EQ(XorRound(level, 4, 1, 0).remote_flows, 4);
  EXPECT_FALSE(XorRound(level, 4, 1, 0).local);
  EXPECT_EQ(XorRound(level, 8, 1, 0).remote_flows, 4);
  // Three ranks per host: pairs straddle the hosts' edges.
  const Level odd = TwoKinds(12, 3);
  EXPECT_EQ(XorRound(odd, 1, 1, 0).remote_flows, 2);
  EXPECT_TRUE(XorRound(odd, 1, 1, 0).local);
  EXPECT_EQ(XorRound(odd, 2, 1, 0).remote_flows, 3);
  EXPECT_EQ(XorRound(TwoKinds(8, 8), 4, 1, 0).remote_flows, 0);
}

TEST(BinomialRound, CrossesOnceTheTreeLeavesHostZero) {
  const Level level = TwoKinds(16, 4);
  EXPECT_EQ(BinomialRound(level, 1, 1, 0).remote_flows, 0);
  EXPECT_EQ(BinomialRound(level, 2, 1, 0).remote_flows, 0);
  EXPECT_EQ(BinomialRound(level, 4, 1, 0).remote_flows, 4);
  EXPECT_FALSE(BinomialRound(level, 4, 1, 0).local);
  EXPECT_EQ(BinomialRound(level, 8, 1, 0).remote_flows, 4);
  // 3 per host, distance 2: pairs (0,2) inside, (1,3) across.
  EXPECT_EQ(BinomialRound(TwoKinds(12, 3), 2, 1, 0).remote_flows, 1);
  EXPECT_TRUE(BinomialRound(TwoKinds(12, 3), 2, 1, 0).local);
  // 5 hosts of one rank, distance 4: the pair (0, 4) only.
  EXPECT_EQ(BinomialRound(TwoKinds(5, 1), 4, 1, 0).remote_flows, 1);
  // Sending hosts: host 0 below L; from L on, the hosts of v < min(d, p − d).
  EXPECT_EQ(BinomialRound(level, 2, 1, 0).sending_hosts, 1);
  EXPECT_EQ(BinomialRound(level, 4, 1, 0).sending_hosts, 1);
  EXPECT_EQ(BinomialRound(level, 8, 1, 0).sending_hosts, 2);
  EXPECT_EQ(BinomialRound(TwoKinds(5, 1), 4, 1, 0).sending_hosts, 1);
  EXPECT_EQ(BinomialRound(TwoKinds(8, 1), 4, 1, 0).sending_hosts, 4);
}

TEST(PipelineRound, OneFlowPerHost) {
  EXPECT_EQ(PipelineRound(TwoKinds(8, 8), 1, 0).remote_flows, 0);
  EXPECT_EQ(PipelineRound(TwoKinds(8, 4), 1, 0).remote_flows, 1);
  EXPECT_TRUE(PipelineRound(TwoKinds(8, 4), 1, 0).local);
  EXPECT_FALSE(PipelineRound(TwoKinds(8, 1), 1, 0).local);
}

TEST(Logs, FloorCeilPowerOfTwo) {
  EXPECT_EQ(FloorLog2(1), 0);
  EXPECT_EQ(FloorLog2(2), 1);
  EXPECT_EQ(FloorLog2(3), 1);
  EXPECT_EQ(FloorLog2(100000), 16);
  EXPECT_EQ(CeilLog2(1), 0);
  EXPECT_EQ(CeilLog2(3), 2);
  EXPECT_EQ(CeilLog2(16), 4);
  EXPECT_EQ(CeilLog2(17), 5);
  EXPECT_TRUE(IsPowerOfTwo(1));
  EXPECT_TRUE(IsPowerOfTwo(1024));
  EXPECT_FALSE(IsPowerOfTwo(0));
  EXPECT_FALSE(IsPowerOfTwo(12));
}

TEST(BestChunks, MinimizesConvexFunctions) {
  EXPECT_EQ(BestChunks(100, [](int64_t k) { return (k - 7.0) * (k - 7.0); }), 7);
  EXPECT_EQ(BestChunks(5, [](int64_t k) { return (k - 7.0) * (k - 7.0); }), 5);
  EXPECT_EQ(BestChunks(100, [](int64_t) { return 1.0; }), 1);  // ties: the smallest
  EXPECT_EQ(BestChunks(0, [](int64_t k) { return 1.0 * k; }), 1);
  // (D + k - 1)(a + b/k): the optimum is sqrt((D - 1) b / a) = 20.
  EXPECT_EQ(BestChunks(1000000, [](int64_t k) { return (5.0 + k - 1) * (1.0 + 100.0 / k); }), 20);
}

TEST(MaxChunks, AtLeastOneChunkOfSixtyFourBytes) {
  EXPECT_EQ(MaxChunks(0), 1);
  EXPECT_EQ(MaxChunks(63), 1);
  EXPECT_EQ(MaxChunks(640), 10);
}

TEST(Levels, LinksFollowTodaysTransports) {
  CostModel model;
  model.link(LinkKind::kShm) = LinkCost{1, 0.1};
  model.link(LinkKind::kTcpLocal) = LinkCost{2, 0.2};
  model.link(LinkKind::kTcpRemote) = LinkCost{3, 0.3};
  model.cpu_us_per_round = 10;
  Topology one_host{8, 1, 8, 2};
  EXPECT_DOUBLE_EQ(FlatLevel(one_host, model).local.alpha_us, 1);
  EXPECT_DOUBLE_EQ(FlatLevel(one_host, model).cpu_us_per_round, 30);
  Topology two_hosts{16, 2, 8, 8};
  const Level flat = FlatLevel(two_hosts, model);
  EXPECT_DOUBLE_EQ(flat.local.alpha_us, 2);
  EXPECT_DOUBLE_EQ(flat.remote.alpha_us, 3);
  EXPECT_DOUBLE_EQ(flat.cpu_us_per_round, 0);
  const Level intra = IntraHostLevel(two_hosts, model);
  EXPECT_EQ(intra.p, 8);
  EXPECT_EQ(intra.hosts(), 1);
  EXPECT_DOUBLE_EQ(intra.local.alpha_us, 1);
  two_hosts.cores_per_host = 2;
  const Level leaders = LeaderLevel(two_hosts, model);
  EXPECT_EQ(leaders.p, 2);
  EXPECT_EQ(leaders.hosts(), 2);
  EXPECT_DOUBLE_EQ(leaders.remote.alpha_us, 3);
  EXPECT_DOUBLE_EQ(leaders.cpu_us_per_round, 0);
  EXPECT_DOUBLE_EQ(IntraHostLevel(two_hosts, model).cpu_us_per_round, 30);
}

}  // namespace
}  // namespace cost_model
}  // namespace lockstep
