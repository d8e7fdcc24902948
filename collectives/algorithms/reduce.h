// Reduce to `root`. ReduceTo chooses the algorithm: the pipelined binary
// tree (collectives/algorithms/pipelined_tree_reduce.h) where
// UsePipelinedTree says so, else the binomial tree.
//
//   AlgorithmContext ctx{transport, seq, 0, deadline};
//   LOCKSTEP_RETURN_IF_ERROR(ReduceTo(ctx, input, output, ReduceOp::kSum, /*root=*/0));
//
// Binomial-tree reduce to `root`, the broadcast tree run backwards: in round
// k (from the last), virtual rank v with v < 2^k receives from v + 2^k and
// reduces op(own, child) in place; v in [2^k, 2^(k+1)) sends to v - 2^k.
// `buffer` is overwritten with partial results on every rank; the full
// result lands at the root (the communicator passes non-roots a scratch copy).
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_REDUCE_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_REDUCE_H_

#include "collectives/algorithms/algorithm.h"

namespace lockstep {

// The contract of the out-of-place BinomialReduce below, except that
// non-roots may also pass `output` (partial results go there: it may be
// `input` itself) or leave it undefined (a scratch tensor).
absl::Status ReduceTo(AlgorithmContext& ctx, const Tensor& input, const Tensor& output, ReduceOp op, int root);

absl::Status BinomialReduce(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op, int root);

// Out of place: `input` is never written or copied. The root's `output`
// gets the result; on other ranks partial results go to a scratch tensor
// (output ignored), and ranks without children send `input` itself.
absl::Status BinomialReduce(AlgorithmContext& ctx, const Tensor& input, const Tensor& output, ReduceOp op, int root);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_REDUCE_H_
