// All-reduce of `buffer` in place over any Transport, choosing the algorithm
// by size: recursive doubling (collectives/algorithms/recursive_doubling_all_reduce.h)
// below `ctx.small_message_bytes` or when there are fewer elements than
// ranks, the pipelined ring (collectives/algorithms/ring_all_reduce.h) otherwise.
//
//   AlgorithmContext ctx{transport, seq, 0, deadline};
//   LOCKSTEP_RETURN_IF_ERROR(AllReduce(ctx, buffer, ReduceOp::kSum));
//
// `buffer`: a contiguous 1-D CPU tensor, the same dtype and count on every
// rank. Both algorithms give bit-identical results on every rank (not
// necessarily identical between the two for floats: the order of additions
// differs).
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_ALL_REDUCE_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_ALL_REDUCE_H_

#include "absl/status/status.h"
#include "collectives/algorithms/algorithm.h"
#include "core/reduce_op.h"
#include "core/tensor.h"

namespace lockstep {

absl::Status AllReduce(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_ALL_REDUCE_H_
