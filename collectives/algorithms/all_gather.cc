#include "collectives/algorithms/all_gather.h"

#include "collectives/algorithms/ring.h"

namespace lockstep {

absl::Status RingAllGather(AlgorithmContext& ctx, const Tensor& buffer) {
  return RunRing(ctx, buffer, ReduceOp::kSum, RingPhases::kAllGather);
}

}  // namespace lockstep
