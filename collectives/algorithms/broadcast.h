// Binomial-tree broadcast of `buffer` from `root`: in round k, every rank that
// already has the data (virtual rank v < 2^k, v = (r - root) mod n) sends it
// to v + 2^k. ceil(log2 n) rounds; the root sends log2 n times.
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_BROADCAST_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_BROADCAST_H_

#include "collectives/algorithms/algorithm.h"

namespace lockstep {

absl::Status BinomialBroadcast(AlgorithmContext& ctx, const Tensor& buffer, int root);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_BROADCAST_H_
