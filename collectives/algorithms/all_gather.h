// Ring all-gather over the chunks of `buffer` (see algorithm.h): rank r
// starts with a valid chunk r; after n-1 steps every chunk is valid on every
// rank, received straight into place (no copy). The pipelined ring of
// collectives/algorithms/ring.h.
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_ALL_GATHER_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_ALL_GATHER_H_

#include "collectives/algorithms/algorithm.h"

namespace lockstep {

// The all-gather the host backend runs: Bruck's (collectives/algorithms/bruck_all_gather.h)
// when UseBruck says so, the ring otherwise. Same contract as RingAllGather.
absl::Status AllGather(AlgorithmContext& ctx, const Tensor& buffer);

// Whether Bruck's ceil(log2 p) steps (and its one extra copy) take less
// α-β-γ time than the ring's p - 1 on `bytes` (the gathered buffer) over p
// ranks, `ranks_per_host` of them behind each host's link: Bruck's step k
// sends min(2^k, ranks_per_host) ranks' blocks over it at once, the ring
// one rank's. A forced all-reduce algorithm (LOCKSTEP_ALGO) decides
// instead: the ring for kRing, Bruck's for the logarithmic ones.
bool UseBruck(AllReduceAlgorithm forced, const LinkConstants& link, double bytes, int p, int ranks_per_host = 1);

absl::Status RingAllGather(AlgorithmContext& ctx, const Tensor& buffer);

// The same with uneven blocks (MPI_Allgatherv): block r of `buffer`
// (`blocks`, one per rank, tiling it in rank order: BlocksOf(counts)) is
// rank r's and valid on rank r at the start; empty blocks are allowed.
absl::Status RingAllGatherV(AlgorithmContext& ctx, const Tensor& buffer, absl::Span<const Chunk> blocks);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_ALL_GATHER_H_
