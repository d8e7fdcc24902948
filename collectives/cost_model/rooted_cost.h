// Broadcast and reduce: the formulas, one function per algorithm.
//
//   using namespace lockstep::cost_model;
//   absl::StatusOr<Topology> t = MakeTopology(64, 8);
//   const CostModel model = DefaultCostModel();
//   Cost binomial = BinomialTreeCost(FlatLevel(*t, model), Direction::kBroadcast, 1 << 20);
//   Cost chain = PipelinedChainCost(FlatLevel(*t, model), Direction::kReduce, 1 << 20, /*chunks=*/0);
//
// n bytes, p ranks, k chunks of s = n/k, D = floor(log2 p) (the depth of a
// binary tree of p ranks), fan = min(2, p − 1) (children of an interior rank):
//
// | algorithm        | rounds            | bytes per round | reduced per round (reduce) |
// |------------------|-------------------|-----------------|----------------------------|
// | binomial tree    | ceil(log2 p)      | n               | n                          |
// | pipelined chain  | p − 1 + k − 1     | s               | s                          |
// | pipelined tree   | D + k − 1         | fan·s           | fan·s                      |
//
// Binomial round k pairs v < 2^k with v + 2^k (BinomialRound); lockstep
// runs it today (collectives/algorithms/broadcast.h, reduce.h). The pipelined
// ones are the textbook (and MPI's) chain and binary tree: in each step every
// edge carries one chunk; a tree's interior rank sends (broadcast) or
// receives and reduces (reduce) fan chunks. chunks = 0 takes the k with the
// least predicted time (BestChunks). The hierarchical forms compose them
// over hosts (today's collectives/hierarchical/hierarchical_backend.h):
//   broadcast: binomial inside the root's host, binomial among the hosts'
//     leaders, binomial inside every other host (the root a leader);
//   reduce: binomial inside each host, binomial among the leaders.
#ifndef LOCKSTEP_COLLECTIVES_COST_MODEL_ROOTED_COST_H_
#define LOCKSTEP_COLLECTIVES_COST_MODEL_ROOTED_COST_H_

#include <cstdint>

#include "collectives/cost_model/cost_model.h"
#include "collectives/cost_model/step_cost.h"
#include "collectives/cost_model/topology.h"

namespace lockstep {
namespace cost_model {

enum class Direction { kBroadcast, kReduce };

Cost BinomialTreeCost(const Level& level, Direction direction, double bytes);
Cost PipelinedChainCost(const Level& level, Direction direction, double bytes, int64_t chunks);
Cost PipelinedTreeCost(const Level& level, Direction direction, double bytes, int64_t chunks);
Cost HierarchicalBinomialTreeCost(const Topology& topology, const CostModel& model, Direction direction, double bytes);

}  // namespace cost_model
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_COST_MODEL_ROOTED_COST_H_
