#include "collectives/algorithms/ring_all_reduce.h"

#include "collectives/algorithms/ring.h"

namespace lockstep {

absl::Status RingAllReduce(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op) {
  return RunRing(ctx, buffer, op, RingPhases::kBoth);
}

}  // namespace lockstep
