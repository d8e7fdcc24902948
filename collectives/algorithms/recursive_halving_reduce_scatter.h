// Reduce-scatter by recursive halving (MPICH's for commutative ops): log2 p
// steps, step k exchanging half of what is left with the rank 2^(log2 p - k - 1)
// away and reducing it: (p-1)/p of the buffer sent, as the ring, in log2 p
// steps instead of n - 1. n not a power of two: the first 2(n - p) ranks
// fold in pairs first (PowerOfTwoFold) and the pair's odd rank hands the
// even one its block at the end.
//
//   AlgorithmContext ctx{transport, seq, 0, deadline};
//   LOCKSTEP_RETURN_IF_ERROR(RecursiveHalvingReduceScatter(ctx, input, buffer, ReduceOp::kSum));
//   // chunk r of `buffer` (ChunkOf) holds op over every rank's chunk r of `input`.
//
// Out of place as the ring's (collectives/algorithms/reduce_scatter.h):
// `input` is left unchanged, `buffer` (as many elements) is working space
// whose chunk r is the result, AVG divided. Each element is reduced as
// op(lower rank's data, higher rank's data) at every step.
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_RECURSIVE_HALVING_REDUCE_SCATTER_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_RECURSIVE_HALVING_REDUCE_SCATTER_H_

#include "absl/status/status.h"
#include "collectives/algorithms/algorithm.h"
#include "core/reduce_op.h"
#include "core/tensor.h"

namespace lockstep {

absl::Status RecursiveHalvingReduceScatter(AlgorithmContext& ctx, const Tensor& input, const Tensor& buffer,
                                           ReduceOp op);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_RECURSIVE_HALVING_REDUCE_SCATTER_H_
