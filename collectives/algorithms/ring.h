// The pipelined ring behind all-reduce, reduce-scatter and all-gather.
//
// Terms (see algorithm.h): n ranks, chunk c of the buffer, rank r's right
// neighbour r+1 and left neighbour r-1. The classic ring runs
//   reduce-scatter steps s = 0..n-2: send chunk (r-s-1), receive chunk
//     (r-s-2) and reduce it into the buffer; afterwards chunk r is final;
//   all-gather steps s = 0..n-2: send chunk (r-s), receive chunk (r-s-1)
//     into place.
// Message j (over both phases) always sends the chunk that message j-1 just
// received. So instead of finishing one step before starting the next, all
// 2(n-1) messages are queued on the two streams at once and message j's send
// is gated by how much of message j-1 has been received (and reduced): data
// flows onward segment by segment, with no bubble between steps or phases,
// as NCCL's ring does.
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_RING_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_RING_H_

#include "collectives/algorithms/algorithm.h"

namespace lockstep {

enum class RingPhases { kReduceScatter, kAllGather, kBoth };

// kReduceScatter: afterwards chunk r of rank r's buffer is op over all ranks
// (AVG divided). kAllGather: rank r's chunk r is sent to all. kBoth: all-reduce.
// `input` (kReduceScatter only; null: `buffer` is the input too): each rank's
// data, read but never written; `buffer` then only receives results (chunk
// r is final, the other chunks hold partial sums).
// `chunks` (empty: ChunkOf's near-equal split): the n chunks, one per rank,
// for the uneven (V) collectives; they must tile the buffer in rank order.
absl::Status RunRing(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op, RingPhases phases,
                     const Tensor* input = nullptr, absl::Span<const Chunk> chunks = {});

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_RING_H_
