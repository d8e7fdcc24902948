// Broadcast of `buffer` from `root`. BroadcastFrom chooses the algorithm:
// the pipelined binary tree (collectives/algorithms/pipelined_tree_broadcast.h)
// where UsePipelinedTree says so (large buffers over many ranks), else the
// binomial tree: in round k, every rank that already has the data (virtual
// rank v < 2^k, v = (r - root) mod n) sends it to v + 2^k. ceil(log2 n)
// rounds; the root sends log2 n times.
//
//   AlgorithmContext ctx{transport, seq, 0, deadline};
//   LOCKSTEP_RETURN_IF_ERROR(BroadcastFrom(ctx, buffer, /*root=*/0));
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_BROADCAST_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_BROADCAST_H_

#include "collectives/algorithms/algorithm.h"

namespace lockstep {

// Chooses from ctx.all_reduce, ctx.link and the size (same on every rank).
absl::Status BroadcastFrom(AlgorithmContext& ctx, const Tensor& buffer, int root);

absl::Status BinomialBroadcast(AlgorithmContext& ctx, const Tensor& buffer, int root);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_BROADCAST_H_
