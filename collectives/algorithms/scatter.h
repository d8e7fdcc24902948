// Direct scatter: the root sends to every other rank at once (one Exchange
// with n-1 concurrent transfers). `slots` at the root is n consecutive
// blocks of mine.numel() elements, block i for rank i (or, for
// DirectScatterV, the blocks given).
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_SCATTER_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_SCATTER_H_

#include "absl/status/status.h"
#include "collectives/algorithms/algorithm.h"
#include "core/tensor.h"

namespace lockstep {

// Root: sends slots[i] to rank i and copies its own into `mine`. Others
// receive into `mine` (`slots` ignored, may be undefined).
absl::Status DirectScatter(AlgorithmContext& ctx, const Tensor& slots, const Tensor& mine, int root);

// Uneven blocks (MPI_Scatterv): rank i's `mine` has blocks[i].count
// elements and receives blocks[i] of the root's `slots`.
absl::Status DirectScatterV(AlgorithmContext& ctx, const Tensor& slots, const Tensor& mine,
                            absl::Span<const Chunk> blocks, int root);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_SCATTER_H_
