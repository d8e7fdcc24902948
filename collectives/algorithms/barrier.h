// Dissemination barrier: in round k every rank sends an empty message to
// r + 2^k and waits for one from r - 2^k. After ceil(log2 n) rounds every
// rank has (transitively) heard from every other.
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_BARRIER_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_BARRIER_H_

#include "collectives/algorithms/algorithm.h"

namespace lockstep {

absl::Status DisseminationBarrier(AlgorithmContext& ctx);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_BARRIER_H_
