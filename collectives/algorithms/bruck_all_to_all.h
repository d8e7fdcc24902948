// Bruck's all-to-all (Bruck et al. 1997; MPICH's and OpenMPI's choice for
// small blocks over many ranks) for blocks of one size: ceil(log2 p) steps
// instead of the pairwise exchange's p − 1 messages each way, at the price
// of sending each block up to log2 p times (about n/2 per step).
//
// Terms (see algorithm.h): p ranks, each with p blocks of `block` elements
// (block j of the input goes to rank j; block i of the output came from
// rank i). Rank r first rotates its input so that slot i holds the block
// for rank r + i; in step k (2^k < p) it sends every slot whose index has
// bit k set to rank r + 2^k in one message, and receives the same slots
// from rank r − 2^k; afterwards slot i holds the block from rank r − i,
// which a last rotation puts in place. Each rank talks to ceil(log2 p)
// peers, so the group connects O(p log p) pairs, not p².
//
//   AlgorithmContext ctx{transport, seq, 0, deadline};
//   // input and output: p blocks of `block` elements each.
//   LOCKSTEP_RETURN_IF_ERROR(BruckAllToAll(ctx, input, output, block));
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_BRUCK_ALL_TO_ALL_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_BRUCK_ALL_TO_ALL_H_

#include <cstdint>

#include "collectives/algorithms/algorithm.h"

namespace lockstep {

// `input` and `output`: 1-D CPU tensors of one dtype, p * block elements
// each, not overlapping; `block` the same on every rank.
absl::Status BruckAllToAll(AlgorithmContext& ctx, const Tensor& input, const Tensor& output, int64_t block);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_BRUCK_ALL_TO_ALL_H_
