// Pairwise all-to-all (MPI_Alltoallv, torch's all_to_all_single with split
// sizes): rank r sends block j of its input to rank j and receives rank i's
// block into block i of its output. Blocks may differ in size per rank and
// direction, and may be empty.
//
// Terms (see algorithm.h): n ranks; step s = 1..n-1 pairs a send to rank
// r+s with a receive from rank r-s (mod n), so every rank talks to a
// different peer in each step and no peer is everybody's first (no hot
// spot), at any world size. A window of steps goes to the transport as one
// Exchange, whose transfers all progress together: no rank ever waits on a
// peer to make room before it can receive, so the schedule cannot deadlock.
// Small blocks (latency bound) put every step in one window; large ones
// keep a few steps in flight at a time (bounded concurrency, as MPI's
// pairwise algorithm). Every pair exchanges a message even for an empty
// block: a rank whose counts disagree with its peer's fails at once, naming
// both sizes, instead of waiting for bytes that never come. The own block
// is a local copy.
//
//   // Rank r sends send_counts[j] elements to rank j and gets recv_counts[i]
//   // from rank i (the peers' send_counts[r]):
//   AlgorithmContext ctx{transport, seq, 0, deadline};
//   const std::vector<Chunk> send = BlocksOf(send_counts), recv = BlocksOf(recv_counts);
//   LOCKSTEP_RETURN_IF_ERROR(PairwiseAllToAll(ctx, input, send, output, recv));
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_ALL_TO_ALL_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_ALL_TO_ALL_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collectives/algorithms/algorithm.h"
#include "core/tensor.h"

#include <cstddef>

namespace lockstep {

// `send_blocks[j]`: the elements of `input` for rank j; `recv_blocks[i]`:
// where rank i's elements go in `output`. One block per rank each; this
// rank's own send and receive blocks must have the same size. `input` and
// `output` are 1-D CPU tensors of one dtype that do not overlap.
absl::Status PairwiseAllToAll(AlgorithmContext& ctx, const Tensor& input, absl::Span<const Chunk> send_blocks,
                              const Tensor& output, absl::Span<const Chunk> recv_blocks);

// The all-to-all the host backend runs: Bruck's
// (collectives/algorithms/bruck_all_to_all.h) when `even` (every rank's
// blocks are of one size, known to every rank: Communicator::AllToAll) and
// UseBruckAllToAll says so; pairwise otherwise. The blocks as above.
absl::Status AllToAll(AlgorithmContext& ctx, const Tensor& input, absl::Span<const Chunk> send_blocks,
                      const Tensor& output, absl::Span<const Chunk> recv_blocks, bool even);

// Whether Bruck's exchange of blocks of `block_bytes` over p ranks,
// `ranks_per_host` (L) of them behind each host's link and
// `ranks_per_core` (s) on each core, takes less α-β-γ-o time than the
// pairwise one (where the pairwise exchange posts every step at once:
// block_bytes <= small_message_bytes):
//   pairwise: α + 2(p − 1)·o·s + max(p − 1, L(p − L))·b·β
//   Bruck:    Σ_k (α + 2o·s + c_k·b·β·min(2^k, L)) + (K + 2)·p·b·γ
// (K = ceil(log2 p) steps, c_k slots with bit k set, the copies at γ;
// ranks sharing a core spend their messages' CPU time in turn). A
// forced algorithm (LOCKSTEP_ALGO) decides instead: Bruck for the
// logarithmic ones (recursive_doubling, rabenseifner), pairwise for ring
// and tree.
bool UseBruckAllToAll(AllReduceAlgorithm forced, const LinkConstants& link, double block_bytes, int p,
                      int ranks_per_host, double ranks_per_core, size_t small_message_bytes);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_ALL_TO_ALL_H_
