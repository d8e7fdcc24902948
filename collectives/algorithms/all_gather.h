// Ring all-gather over the chunks of `buffer` (see algorithm.h): rank r
// starts with a valid chunk r; after n-1 steps every chunk is valid on every
// rank, received straight into place (no copy). The pipelined ring of
// collectives/algorithms/ring.h.
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_ALL_GATHER_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_ALL_GATHER_H_

#include "collectives/algorithms/algorithm.h"

namespace lockstep {

absl::Status RingAllGather(AlgorithmContext& ctx, const Tensor& buffer);

// The same with uneven blocks (MPI_Allgatherv): block r of `buffer`
// (`blocks`, one per rank, tiling it in rank order: BlocksOf(counts)) is
// rank r's and valid on rank r at the start; empty blocks are allowed.
absl::Status RingAllGatherV(AlgorithmContext& ctx, const Tensor& buffer, absl::Span<const Chunk> blocks);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_ALL_GATHER_H_
