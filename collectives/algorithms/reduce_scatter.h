// Ring reduce-scatter over the chunks of `buffer` (see algorithm.h): after it,
// chunk r of rank r's buffer holds op over all ranks' chunk r (AVG not yet divided).
//
// AVG is divided on chunk r. The pipelined ring of collectives/algorithms/ring.h.
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_REDUCE_SCATTER_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_REDUCE_SCATTER_H_

#include "collectives/algorithms/algorithm.h"

namespace lockstep {

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
