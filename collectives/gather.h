// Gather and scatter, direct: the root exchanges with every other rank at
// once (one Exchange with n-1 concurrent transfers). `slots` at the root is
// n consecutive blocks of `block` elements, block i for rank i.
#ifndef LOCKSTEP_COLLECTIVES_GATHER_H_
#define LOCKSTEP_COLLECTIVES_GATHER_H_

#include "collectives/algorithm.h"

namespace lockstep {

// Root: slots[i] = rank i's `mine`. Others only send `mine`.
absl::Status DirectGather(AlgorithmContext& ctx, const Tensor& mine, const Tensor& slots, int root);

// Root: sends slots[i] to rank i and copies its own into `mine`.
absl::Status DirectScatter(AlgorithmContext& ctx, const Tensor& slots, const Tensor& mine, int root);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_GATHER_H_
