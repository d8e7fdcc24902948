// Bruck's all-gather over the blocks of `buffer`: ceil(log2 n) steps at any
// n (no fold), step k sending the 2^k blocks gathered so far to rank
// r - 2^k and receiving as many from rank r + 2^k. The same bytes as the
// ring ((n-1)/n of the buffer) in log2 n steps instead of n - 1: the choice
// for small gathers (collectives/algorithms/all_gather.h).
//
//   AlgorithmContext ctx{transport, seq, 0, deadline};
//   // Block r of `buffer` holds this rank's data; afterwards every block
//   // holds its rank's.
//   LOCKSTEP_RETURN_IF_ERROR(BruckAllGather(ctx, buffer));
//
// Blocks are gathered in rotated order (this rank's first) in a scratch
// tensor and copied into place at the end: one copy of the buffer more than
// the ring, which receives in place.
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_BRUCK_ALL_GATHER_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_BRUCK_ALL_GATHER_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collectives/algorithms/algorithm.h"
#include "core/tensor.h"

namespace lockstep {

// The chunks of `buffer` (ChunkOf: near-equal, one per rank).
absl::Status BruckAllGather(AlgorithmContext& ctx, const Tensor& buffer);

// Uneven blocks (MPI_Allgatherv): `blocks`, one per rank, tiling `buffer`
// in rank order (BlocksOf(counts)); empty blocks are allowed.
absl::Status BruckAllGatherV(AlgorithmContext& ctx, const Tensor& buffer, absl::Span<const Chunk> blocks);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_BRUCK_ALL_GATHER_H_
