// Pipelined binary-tree broadcast of `buffer` from `root` (MPI's and NCCL's
// tree for large messages): the buffer goes down the tree of
// collectives/algorithms/pipelined_tree.h in `chunks` chunks; in step t a
// rank at depth d receives chunk t − d + 1 from its parent and sends chunk
// t − d to its children, so every edge is busy at once and the whole
// broadcast takes D + chunks − 1 steps of a chunk each, where the binomial
// tree (broadcast.h) takes ceil(log2 p) of the whole buffer. Each rank
// talks to three peers only (its parent and two children).
//
//   AlgorithmContext ctx{transport, seq, 0, deadline};
//   const int chunks = PipelinedTreeChunks(ctx.link, buffer.nbytes(), ctx.size(), buffer.numel(), false);
//   LOCKSTEP_RETURN_IF_ERROR(PipelinedTreeBroadcast(ctx, buffer, /*root=*/0, chunks));
//
// `buffer`: a contiguous 1-D CPU tensor, the same count on every rank;
// `chunks` the same on every rank (clamped to [1, count]).
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_PIPELINED_TREE_BROADCAST_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_PIPELINED_TREE_BROADCAST_H_

#include "collectives/algorithms/algorithm.h"
#include "collectives/algorithms/pipelined_tree.h"

namespace lockstep {

absl::Status PipelinedTreeBroadcast(AlgorithmContext& ctx, const Tensor& buffer, int root, int chunks);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_PIPELINED_TREE_BROADCAST_H_
