// Ring all-reduce of `buffer` in place: ring reduce-scatter then ring
// all-gather, pipelined (collectives/algorithms/ring.h). Each rank sends and receives
// 2(n-1)/n of the buffer: bandwidth-optimal, the choice for large buffers
// (collectives/algorithms/all_reduce.h). Reduction of a segment overlaps the transfer of
// the next, and data flows on without waiting for whole steps.
//
// Every rank gets bit-identical results (each chunk is reduced once, in ring
// order, then copied). AVG divides once, before the all-gather.
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_RING_ALL_REDUCE_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_RING_ALL_REDUCE_H_

#include "absl/status/status.h"
#include "collectives/algorithms/algorithm.h"
#include "core/reduce_op.h"
#include "core/tensor.h"

namespace lockstep {

absl::Status RingAllReduce(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_RING_ALL_REDUCE_H_
