// Recursive-doubling all-reduce of `buffer` in place: log2(n) steps, each
// exchanging the whole buffer with the partner r XOR 2^k. Latency-optimal:
// the choice for small buffers (collectives/algorithms/all_reduce.h). For n not a power
// of two, the first 2*(n - p) ranks (p the largest power of two <= n) fold
// pairwise first (odd ranks take their even neighbour's data) and get the
// result back at the end.
//
// Every rank gets bit-identical results: each pairwise reduction is computed
// as op(lower rank's data, higher rank's data). AVG divides once at the end.
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_RECURSIVE_DOUBLING_ALL_REDUCE_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_RECURSIVE_DOUBLING_ALL_REDUCE_H_

#include "absl/status/status.h"
#include "collectives/algorithms/algorithm.h"
#include "core/reduce_op.h"
#include "core/tensor.h"

namespace lockstep {

absl::Status RecursiveDoublingAllReduce(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_RECURSIVE_DOUBLING_ALL_REDUCE_H_
