// All-gather and reduce-scatter: the formulas, one function per algorithm.
//
//   using namespace lockstep::cost_model;
//   absl::StatusOr<Topology> t = MakeTopology(16, 4);
//   const Level flat = FlatLevel(*t, DefaultCostModel());
//   Cost gather = BruckAllGatherCost(flat, 1 << 20);
//   Cost scatter = RecursiveHalvingReduceScatterCost(flat, 1 << 20);
//
// n bytes: the all-gather's output, the reduce-scatter's input, p blocks
// of b = n/p; p' = 2^floor(log2 p); K = ceil(log2 p).
//
// | op, algorithm                      | rounds                  | bytes per rank             | reduced per rank    |
// |------------------------------------|-------------------------|----------------------------|---------------------|
// | all_gather ring                    | p − 1                   | (p−1)·b                    | 0                   |
// | all_gather recursive doubling      | log2 p' (+2 if p ≠ p')  | (p'−1)/p'·n (+b + n)       | 0                   |
// | all_gather Bruck                   | K                       | (p−1)·b                    | 0                   |
// | reduce_scatter ring                | p − 1                   | (p−1)·b                    | (p−1)·b             |
// | reduce_scatter recursive halving   | log2 p' (+2 if p ≠ p')  | (p'−1)/p'·n (+n + b)       | (p'−1)/p'·n (+n)    |
// | reduce_scatter Bruck               | K                       | (p−1)·b                    | (p−1)·b             |
//
// Ring (collectives/algorithms/all_gather.h, reduce_scatter.h, today's):
//   p − 1 steps of one block to the right neighbour (ShiftRound(1)), run as
//   a pipeline: α adds along the chain, ceil((p−1)/L) remote hops, the
//   rest local (AddRingChain).
// Recursive doubling all-gather (MPICH): round k sends the 2^k blocks
//   gathered so far to r XOR 2^k (2^k·n/p' bytes). Non-powers of two fold:
//   the first p − p' odd ranks hand their block to their even neighbour
//   first (+1 round of b) and receive all n at the end (+1 round of n).
// Recursive halving reduce-scatter (MPICH): round k sends the half of what
//   is left that the partner keeps, n/2^(k+1) bytes, to r XOR p'/2^(k+1), and
//   reduces the half it keeps. Non-powers of two fold: +1 round of n
//   (reduced) before, +1 round of b (the folded ranks' result) after.
// Bruck all-gather: round k (k = 0..K−1) receives min(2^k, p − 2^k) blocks
//   from r + 2^k and sends as many to r − 2^k (ShiftRound(2^k)); any p,
//   no fold; the final local rotation of the output (a copy) is left out.
// Bruck reduce-scatter: the all-gather's rounds in reverse, each reducing
//   what it receives (the dual schedule, same volumes).
#ifndef LOCKSTEP_COLLECTIVES_COST_MODEL_ALL_GATHER_REDUCE_SCATTER_COST_H_
#define LOCKSTEP_COLLECTIVES_COST_MODEL_ALL_GATHER_REDUCE_SCATTER_COST_H_

#include "collectives/cost_model/step_cost.h"

namespace lockstep {
namespace cost_model {

Cost RingAllGatherCost(const Level& level, double bytes);
Cost RecursiveDoublingAllGatherCost(const Level& level, double bytes);
Cost BruckAllGatherCost(const Level& level, double bytes);

Cost RingReduceScatterCost(const Level& level, double bytes);
Cost RecursiveHalvingReduceScatterCost(const Level& level, double bytes);
Cost BruckReduceScatterCost(const Level& level, double bytes);

}  // namespace cost_model
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_COST_MODEL_ALL_GATHER_REDUCE_SCATTER_COST_H_
