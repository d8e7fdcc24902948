// Direct gather: the root receives from every other rank at once (one
// Exchange with n-1 concurrent transfers). `slots` at the root is n
// consecutive blocks of mine.numel() elements, block i for rank i (or, for
// DirectGatherV, the blocks given).
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_GATHER_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_GATHER_H_

#include "absl/status/status.h"
#include "collectives/algorithms/algorithm.h"
#include "core/tensor.h"

namespace lockstep {

// Root: slots[i] = rank i's `mine`. Others only send `mine`.
absl::Status DirectGather(AlgorithmContext& ctx, const Tensor& mine, const Tensor& slots, int root);

// Uneven blocks (MPI_Gatherv): rank i's `mine` has blocks[i].count
// elements and lands at blocks[i] of the root's `slots`.
absl::Status DirectGatherV(AlgorithmContext& ctx, const Tensor& mine, const Tensor& slots,
                           absl::Span<const Chunk> blocks, int root);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_GATHER_H_
