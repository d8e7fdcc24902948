#include "collectives/cost_model/all_reduce_cost.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "collectives/cost_model/rooted_cost.h"

namespace lockstep {
namespace cost_model {
namespace {

// The fold of a non-power-of-two group into p' ranks and its unfold: one
// round of all n (reduced) before, one of all n after (MPICH's scheme).
void AddFold(const Level& level, double bytes, Cost* cost) {
  AddRounds(level, XorRound(level, 1, bytes, bytes), 1, cost);
}
void AddUnfold(const Level& level, double bytes, Cost* cost) {
  AddRounds(level, XorRound(level, 1, bytes, 0), 1, cost);
}

// A pipelined reduce then broadcast over a binary tree of depth D in k
// chunks, `share` of each chunk per tree edge and step (1: one tree; 0.5:
// each of two trees).
Cost TreeAllReduce(const Level& level, double bytes, int64_t chunks, double share) {
  if (level.p <= 1) return Cost{};
  const int depth = FloorLog2(level.p);
  const double fan = static_cast<double>(std::min<int64_t>(2, level.p - 1));
  auto cost_for = [&](int64_t k) {
    const double moved = fan * share * bytes / static_cast<double>(k);
    const double steps = static_cast<double>(depth + k - 1);
    Cost cost;
    AddRounds(level, PipelineRound(level, moved, moved), steps, &cost);  // up: receive, reduce
    AddRounds(level, PipelineRound(level, moved, 0), steps, &cost);      // down: send
    return cost;
  };
  const int64_t k = chunks > 0 ? chunks : BestChunks(MaxChunks(bytes), [&](int64_t c) { return cost_for(c).time_us; });
  return cost_for(k);
}

}  // namespace

Cost RingAllReduceCost(const Level& level, double bytes) {
  Cost cost;
  if (level.p <= 1) return cost;
  const double chunk = bytes / static_cast<double>(level.p);
  // Reduce-scatter then all-gather: one chain of 2(p − 1) steps (the
  // all-gather's first step forwards what the reduce-scatter's last made),
  // p − 1 of them reducing.
  Round round = ShiftRound(level, 1, chunk, chunk / 2);
  AddRingChain(level, round, 2 * (level.p - 1), &cost);
  return cost;
}

Cost RecursiveDoublingAllReduceCost(const Level& level, double bytes) {
  Cost cost;
  if (level.p <= 1) return cost;
  const int log = FloorLog2(level.p);
  const bool folded = !IsPowerOfTwo(level.p);
  if (folded) AddFold(level, bytes, &cost);
  for (int k = 0; k < log; ++k) AddRounds(level, XorRound(level, int64_t{1} << k, bytes, bytes), 1, &cost);
  if (folded) AddUnfold(level, bytes, &cost);
  return cost;
}

Cost RabenseifnerAllReduceCost(const Level& level, double bytes) {
  Cost cost;
  if (level.p <= 1) return cost;
  const int log = FloorLog2(level.p);
  const bool folded = !IsPowerOfTwo(level.p);
  if (folded) AddFold(level, bytes, &cost);
  for (int k = 0; k < log; ++k) {  // reduce-scatter by recursive halving
    const double half = bytes / static_cast<double>(int64_t{2} << k);
    AddRounds(level, XorRound(level, int64_t{1} << k, half, half), 1, &cost);
  }
  for (int k = log - 1; k >= 0; --k) {  // all-gather by recursive doubling
    const double half = bytes / static_cast<double>(int64_t{2} << k);
    AddRounds(level, XorRound(level, int64_t{1} << k, half, 0), 1, &cost);
  }
  if (folded) AddUnfold(level, bytes, &cost);
  return cost;
}

Cost BinaryTreeAllReduceCost(const Level& level, double bytes, int64_t chunks) {
  return TreeAllReduce(level, bytes, chunks, 1.0);
}

Cost DoubleBinaryTreeAllReduceCost(const Level& level, double bytes, int64_t chunks) {
  return TreeAllReduce(level, bytes, chunks, 0.5);
}

absl::StatusOr<Cost> HierarchicalAllReduceCost(const Topology& topology, const CostModel& model, Algorithm inner,
                                               double bytes) {
  const Level leaders = LeaderLevel(topology, model);
  Cost among;
  switch (inner) {
    case Algorithm::kRing:
      among = RingAllReduceCost(leaders, bytes);
      break;
    case Algorithm::kRecursiveDoubling:
      among = RecursiveDoublingAllReduceCost(leaders, bytes);
      break;
    case Algorithm::kRabenseifner:
      among = RabenseifnerAllReduceCost(leaders, bytes);
      break;
    case Algorithm::kDoubleBinaryTree:
      among = DoubleBinaryTreeAllReduceCost(leaders, bytes, 0);
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("hierarchical all_reduce: '", AlgorithmName(inner),
                                                     "' cannot run among the leaders; use ring, recursive_doubling, "
                                                     "rabenseifner or double_binary_tree"));
  }
  const Level local = IntraHostLevel(topology, model);
  return BinomialTreeCost(local, Direction::kReduce, bytes) + among +
         BinomialTreeCost(local, Direction::kBroadcast, bytes);
}

}  // namespace cost_model
}  // namespace lockstep
