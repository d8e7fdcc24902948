#include "collectives/reduce_scatter.h"

#include "collectives/ring.h"

namespace lockstep {

absl::Status RingReduceScatter(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op) {
  return RunRing(ctx, buffer, op, RingPhases::kReduceScatter);
}

}  // namespace lockstep
