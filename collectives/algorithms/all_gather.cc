#include "collectives/algorithms/all_gather.h"

#include "collectives/algorithms/ring.h"

namespace lockstep {

absl::Status RingAllGather(AlgorithmContext& ctx, const Tensor& buffer) {
  return RunRing(ctx, buffer, ReduceOp::kSum, RingPhases::kAllGather);
}

absl::Status RingAllGatherV(AlgorithmContext& ctx, const Tensor& buffer, absl::Span<const Chunk> blocks) {
  if (static_cast<int>(blocks.size()) != ctx.size()) {
    return absl::InvalidArgumentError("RingAllGatherV: one block per rank expected");
  }
  return RunRing(ctx, buffer, ReduceOp::kSum, RingPhases::kAllGather, nullptr, blocks);
}

}  // namespace lockstep
