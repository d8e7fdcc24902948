// Ring reduce-scatter over the chunks of `buffer` (see algorithm.h): after it,
// chunk r of rank r's buffer holds op over all ranks' chunk r (AVG not yet divided).
//
// AVG is divided on chunk r. The pipelined ring of collectives/algorithms/ring.h.
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_REDUCE_SCATTER_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_REDUCE_SCATTER_H_

#include "collectives/algorithms/algorithm.h"

namespace lockstep {

// The reduce-scatter the host backend runs: recursive halving
// (collectives/algorithms/recursive_halving_reduce_scatter.h) when
// UseRecursiveHalving says so, the ring otherwise. Same contract as the
// out-of-place RingReduceScatter (AVG divided on chunk r).
absl::Status ReduceScatter(AlgorithmContext& ctx, const Tensor& input, const Tensor& buffer, ReduceOp op);

// Whether recursive halving's log2 p steps (its reductions not overlapped,
// a copy of the input, and a fold when p is not a power of two) take less
// α-β-γ time than the ring's p - 1 on `bytes` (the input) over p ranks,
// `ranks_per_host` of them behind each host's link (a step of distance d
// sends min(d, ranks_per_host) ranks' halves over it at once, the ring one
// rank's). A forced all-reduce algorithm (LOCKSTEP_ALGO) decides instead:
// the ring for kRing, recursive halving for the logarithmic ones.
bool UseRecursiveHalving(AllReduceAlgorithm forced, const LinkConstants& link, double bytes, int p,
                         int ranks_per_host = 1);

absl::Status RingReduceScatter(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op);

// Out of place: `input` is left unchanged (and never copied); afterwards
// chunk r of `buffer` (as many elements as `input`) holds the result, its
// other chunks partial results.
absl::Status RingReduceScatter(AlgorithmContext& ctx, const Tensor& input, const Tensor& buffer, ReduceOp op);

// Out of place with uneven blocks (MPI_Reduce_scatter with recvcounts):
// `blocks` (one per rank, tiling `input` in rank order: BlocksOf(counts));
// afterwards block r of `buffer` holds op over all ranks' block r (AVG
// divided); empty blocks are allowed.
absl::Status RingReduceScatterV(AlgorithmContext& ctx, const Tensor& input, const Tensor& buffer,
                                absl::Span<const Chunk> blocks, ReduceOp op);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_REDUCE_SCATTER_H_
