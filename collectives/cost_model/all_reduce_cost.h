// All-reduce: the formulas, one function per algorithm.
//
//   using namespace lockstep::cost_model;
//   absl::StatusOr<Topology> t = MakeTopology(1024, 8);
//   const CostModel model = DefaultCostModel();
//   const Level flat = FlatLevel(*t, model);
//   Cost ring = RingAllReduceCost(flat, 64 << 20);
//   Cost tree = DoubleBinaryTreeAllReduceCost(flat, 64 << 20, /*chunks=*/0);
//   absl::StatusOr<Cost> hier = HierarchicalAllReduceCost(*t, model, Algorithm::kRecursiveDoubling, 4096);
//
// n bytes on each of p ranks; p' = 2^floor(log2 p), the largest power of
// two <= p; D = floor(log2 p); k chunks of s = n/k; fan = min(2, p − 1).
//
// | algorithm            | rounds                     | bytes per rank               | reduced per rank     |
// |----------------------|----------------------------|------------------------------|----------------------|
// | ring                 | 2(p−1)                     | 2(p−1)/p·n                   | (p−1)/p·n            |
// | recursive doubling   | log2 p' (+2 if p ≠ p')     | n·log2 p' (+2n)              | n·log2 p' (+n)       |
// | Rabenseifner         | 2·log2 p' (+2 if p ≠ p')   | 2(p'−1)/p'·n (+2n)           | (p'−1)/p'·n (+n)     |
// | binary tree          | 2(D + k − 1)               | 2(D + k − 1)·fan·s           | (D + k − 1)·fan·s    |
// | double binary tree   | 2(D + k − 1)               | 2(D + k − 1)·fan·s/2         | (D + k − 1)·fan·s/2  |
// | hierarchical(X)      | intra reduce + X + intra broadcast (below)                                      |
//
// Ring (collectives/algorithms/ring_all_reduce.h): reduce-scatter then
//   all-gather, each of p − 1 steps of n/p to the right neighbour
//   (ShiftRound(1): with several hosts one rank per host sends across). The
//   steps run as one pipeline (AddRingChain): α adds along a chain of
//   2(p−1) edges, ceil(2(p−1)/L) of them across hosts; every step moves
//   n/p over the slowest edge.
// Recursive doubling (collectives/algorithms/recursive_doubling_all_reduce.h):
//   round k exchanges all n with r XOR 2^k and reduces it. p not a power of
//   two folds first as MPICH does: the first 2(p − p') ranks pair up, odd
//   ones send all n to their even neighbour, which reduces it (+1 round),
//   and get the result back at the end (+1 round). Rounds after the fold
//   are classified on the ranks' original places (exact when p = p').
// Rabenseifner (MPICH's allreduce_intra_reduce_scatter_allgather):
//   reduce-scatter by recursive halving, round k (k = 0..log2 p' − 1)
//   sending n/2^(k+1) to r XOR 2^k and reducing it; then all-gather by
//   recursive doubling, the same rounds in reverse (the largest messages
//   between the closest ranks, inside a host when L allows). Non-powers of
//   two fold as above (+2 rounds of n, +n reduced).
// Binary tree: a pipelined reduce up an in-order binary tree of depth D
//   (D + k − 1 steps: an interior rank receives fan chunks and reduces
//   them) then a pipelined broadcast down it (D + k − 1 steps: it sends fan
//   chunks).
// Double binary tree (NCCL's): two such trees, each carrying half of every
//   chunk, arranged so that a rank is interior in at most one (NCCL mirrors
//   or shifts the first tree); per step a rank receives (up) or sends
//   (down) at most fan half-chunks, fan·s/2 bytes, in the tree where it is
//   interior and one half-chunk where it is a leaf, over the same depth D.
//   Both trees: chunks = 0 takes the best k (BestChunks); each step costs
//   the busiest rank's bytes over the slowest link (PipelineRound).
// Hierarchical(X) (collectives/hierarchical/hierarchical_backend.h): binomial
//   reduce inside each host over shared memory (ceil(log2 L) rounds of n),
//   X among the H leaders over kTcpRemote (the formula above with p = H),
//   binomial broadcast inside each host (ceil(log2 L) rounds of n). The
//   intra-host phases pay the CPU term of L ranks, the leaders' phase none.
#ifndef LOCKSTEP_COLLECTIVES_COST_MODEL_ALL_REDUCE_COST_H_
#define LOCKSTEP_COLLECTIVES_COST_MODEL_ALL_REDUCE_COST_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "collectives/cost_model/collective.h"
#include "collectives/cost_model/cost_model.h"
#include "collectives/cost_model/step_cost.h"
#include "collectives/cost_model/topology.h"

namespace lockstep {
namespace cost_model {

Cost RingAllReduceCost(const Level& level, double bytes);
Cost RecursiveDoublingAllReduceCost(const Level& level, double bytes);
Cost RabenseifnerAllReduceCost(const Level& level, double bytes);
Cost BinaryTreeAllReduceCost(const Level& level, double bytes, int64_t chunks);
Cost DoubleBinaryTreeAllReduceCost(const Level& level, double bytes, int64_t chunks);

// `inner`: kRing, kRecursiveDoubling, kRabenseifner or kDoubleBinaryTree
// (the algorithm among the leaders); InvalidArgument otherwise.
absl::StatusOr<Cost> HierarchicalAllReduceCost(const Topology& topology, const CostModel& model, Algorithm inner,
                                               double bytes);

}  // namespace cost_model
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_COST_MODEL_ALL_REDUCE_COST_H_
