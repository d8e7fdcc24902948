// Pipelined binary-tree reduce to `root`, the broadcast of
// pipelined_tree_broadcast.h run upwards: in step t a rank at depth d
// receives chunk t − (D − d − 1) from each child, reduces it into its own
// as op(op(own, first child), second child), and sends chunk t − (D − d),
// reduced the step before, to its parent. D + chunks − 1 steps; each rank
// talks to its parent and two children only.
//
//   AlgorithmContext ctx{transport, seq, 0, deadline};
//   const int chunks = PipelinedTreeChunks(ctx.link, input.nbytes(), ctx.size(), input.numel(), true);
//   LOCKSTEP_RETURN_IF_ERROR(PipelinedTreeReduce(ctx, input, output, ReduceOp::kSum, /*root=*/0, chunks));
//
// Out of place: `input` is never written (unless it is `output`). The
// root's `output` gets the result (AVG divided once there). On other ranks
// partial results go to `output` when it is defined (it may be `input`
// itself: in place), else to a scratch tensor; ranks without children send
// `input` itself. `chunks` the same on every rank (clamped to [1, count]).
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_PIPELINED_TREE_REDUCE_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_PIPELINED_TREE_REDUCE_H_

#include "collectives/algorithms/algorithm.h"
#include "collectives/algorithms/pipelined_tree.h"

namespace lockstep {

absl::Status PipelinedTreeReduce(AlgorithmContext& ctx, const Tensor& input, const Tensor& output, ReduceOp op,
                                 int root, int chunks);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_PIPELINED_TREE_REDUCE_H_
