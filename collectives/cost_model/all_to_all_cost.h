// All-to-all and barrier: the formulas, one function per algorithm.
//
//   using namespace lockstep::cost_model;
//   absl::StatusOr<Topology> t = MakeTopology(64, 8);
//   const CostModel model = DefaultCostModel();
//   Cost pairwise = PairwiseAllToAllCost(FlatLevel(*t, model), 1 << 20);
//   Cost barrier = HierarchicalDisseminationBarrierCost(*t, model);
//
// n bytes: each rank's send buffer, p blocks of b = n/p; K = ceil(log2 p);
// c_k = how many of the indices 0..p−1 have bit k set.
//
// | op, algorithm                  | rounds        | bytes per rank      |
// |--------------------------------|---------------|---------------------|
// | all_to_all pairwise            | ceil((p−1)/W) | (p−1)·b             |
// | all_to_all Bruck               | K             | Σ_k c_k·b (≈ n/2·K) |
// | barrier dissemination          | K             | 0                   |
// | barrier hierarchical           | 2·ceil(log2 L) + ceil(log2 H) | 0   |
//
// Pairwise (collectives/algorithms/all_to_all.h, today's): step s = 1..p−1
//   sends block r+s to rank r+s and receives from r−s (ShiftRound(s)): with
//   several hosts, once s >= L every rank of a host sends across, so the
//   host's link carries L blocks a step. The code posts a window of steps
//   at once: all p − 1 when a block is at most small_message_bytes, else 4
//   (kPairwiseLargeWindow); a window is one round, one α, whose bytes are
//   its steps' together (what a host sends across: Σ min(L, s, p − s)
//   blocks). So small blocks cost α + (p−1)·b·β, not (p−1)·α; the scale lab
//   measured 1.5 hops for 8 ranks on 4 hosts where one α per step said 7.
// Bruck: round k sends the c_k blocks whose index has bit k set to r + 2^k
//   (ShiftRound(2^k)); the two local rotations (copies of n) are left out.
// Dissemination (collectives/algorithms/barrier.h, today's): round k sends an
//   empty message to r + 2^k and waits for one from r − 2^k: K·α.
// Hierarchical: a dissemination barrier inside each host, one among the
//   hosts' leaders, one inside each host again (today's, for mixed groups).
#ifndef LOCKSTEP_COLLECTIVES_COST_MODEL_ALL_TO_ALL_COST_H_
#define LOCKSTEP_COLLECTIVES_COST_MODEL_ALL_TO_ALL_COST_H_

#include <cstdint>

#include "collectives/cost_model/cost_model.h"
#include "collectives/cost_model/step_cost.h"
#include "collectives/cost_model/topology.h"

namespace lockstep {
namespace cost_model {

// Steps in flight at once for blocks above small_message_bytes
// (collectives/algorithms/all_to_all.cc's kLargeWindow).
inline constexpr int64_t kPairwiseLargeWindow = 4;

// small_message_bytes: AlgorithmOptions::small_message_bytes, the block size
// up to which every step is posted at once (W = p − 1; else W = 4).
Cost PairwiseAllToAllCost(const Level& level, double bytes, double small_message_bytes = 256 << 10);
Cost BruckAllToAllCost(const Level& level, double bytes);

Cost DisseminationBarrierCost(const Level& level);
Cost HierarchicalDisseminationBarrierCost(const Topology& topology, const CostModel& model);

}  // namespace cost_model
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_COST_MODEL_ALL_TO_ALL_COST_H_
