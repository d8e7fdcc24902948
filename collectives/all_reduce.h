// All-reduce of `buffer` in place, two algorithms (chosen by size in
// communicator.cc; the threshold is an option):
//
//   * RingAllReduce: ring reduce-scatter then ring all-gather, pipelined
//     (collectives/ring.h). Each rank sends and receives 2(n-1)/n of the
//     buffer: bandwidth-optimal. Reduction of a segment overlaps the transfer
//     of the next, and data flows on without waiting for whole steps.
//   * RecursiveDoublingAllReduce: log2(n) steps, each exchanging the whole
//     buffer with the partner r XOR 2^k: latency-optimal for small buffers.
//     For n not a power of two, the first 2*(n - p) ranks (p the largest
//     power of two <= n) fold pairwise first (odd ranks take their even
//     neighbour's data) and get the result back at the end.
//
// Both give bit-identical results on every rank: each pairwise reduction is
// computed as op(lower rank's data, higher rank's data).
#ifndef LOCKSTEP_COLLECTIVES_ALL_REDUCE_H_
#define LOCKSTEP_COLLECTIVES_ALL_REDUCE_H_

#include "collectives/algorithm.h"

namespace lockstep {

absl::Status RingAllReduce(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op);
absl::Status RecursiveDoublingAllReduce(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALL_REDUCE_H_
