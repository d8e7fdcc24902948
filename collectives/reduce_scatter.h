// Ring reduce-scatter over the chunks of `buffer` (see algorithm.h): after it,
// chunk r of rank r's buffer holds op over all ranks' chunk r (AVG not yet divided).
//
// Step s (0 <= s < n-1): send chunk (r-s-1) mod n to rank r+1, receive chunk
// (r-s-2) mod n from rank r-1 into a scratch buffer and reduce it into the
// buffer segment by segment, while later segments are still arriving. The
// chunk sent at step s+1 is the one completed at step s.
#ifndef LOCKSTEP_COLLECTIVES_REDUCE_SCATTER_H_
#define LOCKSTEP_COLLECTIVES_REDUCE_SCATTER_H_

#include "collectives/algorithm.h"

namespace lockstep {

absl::Status RingReduceScatter(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_REDUCE_SCATTER_H_
