// All-reduce of `buffer` in place over any Transport, the algorithm chosen
// by ChooseAllReduce from the size, the world and the options:
// - recursive doubling (collectives/algorithms/recursive_doubling_all_reduce.h)
// below `ctx.small_message_bytes` or with fewer elements than ranks;
// - above it, Rabenseifner's (collectives/algorithms/rabenseifner_all_reduce.h)
// or the pipelined ring (collectives/algorithms/ring_all_reduce.h),
// whichever AllReduceTime predicts faster;
// - `ctx.all_reduce` other than kAuto forces one (LOCKSTEP_ALGO).
//
//   AlgorithmContext ctx{transport, seq, 0, deadline};
//   LOCKSTEP_RETURN_IF_ERROR(AllReduce(ctx, buffer, ReduceOp::kSum));
//
// `buffer`: a contiguous 1-D CPU tensor, the same dtype and count on every
// rank. Every algorithm gives bit-identical results on every rank (not
// necessarily identical between two algorithms for floats: the order of
// additions differs), and every rank chooses the same one: the choice
// depends only on values all ranks share.
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_ALL_REDUCE_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_ALL_REDUCE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "collectives/algorithms/algorithm.h"
#include "core/reduce_op.h"
#include "core/tensor.h"

namespace lockstep {

absl::Status AllReduce(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op);

// The α-β-γ time (µs) the model predicts for `algorithm` (not kAuto) on
// `bytes` over p ranks (the formulas of collectives/cost_model/all_reduce_cost.h
// on one kind of link; the ring's reductions overlap its transfers, the
// others' do not).
double AllReduceTime(AllReduceAlgorithm algorithm, double bytes, int p, const LinkConstants& link);

// The algorithm AllReduce runs: a pure function of its arguments.
AllReduceAlgorithm ChooseAllReduce(AllReduceAlgorithm forced, size_t small_message_bytes, const LinkConstants& link,
                                   size_t bytes, int64_t count, int p);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_ALL_REDUCE_H_
