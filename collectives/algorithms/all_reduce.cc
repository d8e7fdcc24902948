#include "collectives/algorithms/all_reduce.h"

#include "collectives/algorithms/recursive_doubling_all_reduce.h"
#include "collectives/algorithms/ring_all_reduce.h"

namespace lockstep {

absl::Status AllReduce(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op) {
  if (buffer.nbytes() < ctx.small_message_bytes || buffer.numel() < ctx.size()) {
    return RecursiveDoublingAllReduce(ctx, buffer, op);
  }
  return RingAllReduce(ctx, buffer, op);
}

}  // namespace lockstep
