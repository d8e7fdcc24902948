// Binomial-tree reduce to `root`, the broadcast tree run backwards: in round
// k (from the last), virtual rank v with v < 2^k receives from v + 2^k and
// reduces op(own, child) in place; v in [2^k, 2^(k+1)) sends to v - 2^k.
// `buffer` is overwritten with partial results on every rank; the full
// result lands at the root (the communicator passes non-roots a scratch copy).
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_REDUCE_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_REDUCE_H_

#include "collectives/algorithms/algorithm.h"

namespace lockstep {

absl::Status BinomialReduce(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op, int root);

// Out of place: `input` is never written or copied. The root's `output`
// gets the result; on other ranks partial results go to a scratch tensor
// (output ignored), and ranks without children send `input` itself.
absl::Status BinomialReduce(AlgorithmContext& ctx, const Tensor& input, const Tensor& output, ReduceOp op, int root);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_REDUCE_H_
