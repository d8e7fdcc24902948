// Rabenseifner's all-reduce of `buffer` in place: a reduce-scatter by
// recursive halving, then an all-gather by recursive doubling (MPICH's
// "reduce_scatter_allgather"). 2*log2(p) steps and 2(p-1)/p of the buffer
// sent per rank: the ring's bandwidth with recursive doubling's step count,
// the choice for medium and large buffers at many ranks
// (collectives/algorithms/all_reduce.h).
//
//   AlgorithmContext ctx{transport, seq, 0, deadline};
//   LOCKSTEP_RETURN_IF_ERROR(RabenseifnerAllReduce(ctx, buffer, ReduceOp::kSum));
//
// The halving starts with the nearest partner (r XOR 1) and the doubling
// ends with it, so the largest messages go between neighbouring ranks (on
// one host, in the usual block placement). n not a power of two: the first
// 2(n - p) ranks fold in pairs (PowerOfTwoFold), as in recursive doubling.
//
// Every rank gets bit-identical results: each element is reduced at one
// rank, as op(lower rank's data, higher rank's data) at every step, and
// copied to the others. AVG divides each reduced chunk once by n.
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_RABENSEIFNER_ALL_REDUCE_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_RABENSEIFNER_ALL_REDUCE_H_

#include "absl/status/status.h"
#include "collectives/algorithms/algorithm.h"
#include "core/reduce_op.h"
#include "core/tensor.h"

namespace lockstep {

absl::Status RabenseifnerAllReduce(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_RABENSEIFNER_ALL_REDUCE_H_
