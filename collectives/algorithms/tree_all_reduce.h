// Tree all-reduce: a pipelined binary-tree reduce to rank 0
// (pipelined_tree_reduce.h) and a pipelined broadcast back down the same
// tree (pipelined_tree_broadcast.h), each rank talking to its parent and
// two children only. 2(D + k − 1) steps, D = floor(log2 p). The result is
// computed once, at rank 0, so every rank holds the same bits.
//
//   AlgorithmContext ctx{transport, seq, 0, deadline};
//   LOCKSTEP_RETURN_IF_ERROR(TreeAllReduce(ctx, buffer, ReduceOp::kSum));
//
// The α-β model never prefers it to the others on one kind of link (it
// moves about 2·fan·n bytes through an interior rank, Rabenseifner's 2n
// and the ring 2n, in more steps than recursive doubling), so
// ChooseAllReduce takes it only when forced (LOCKSTEP_ALGO=tree); it is
// there for what the model leaves out: very many ranks with few
// connections each.
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_TREE_ALL_REDUCE_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_TREE_ALL_REDUCE_H_

#include "collectives/algorithms/algorithm.h"

namespace lockstep {

// `buffer`: a contiguous 1-D CPU tensor, the same count on every rank;
// chunk counts from PipelinedTreeChunks with ctx.link.
absl::Status TreeAllReduce(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_TREE_ALL_REDUCE_H_
