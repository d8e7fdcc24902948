#include "collectives/algorithms/reduce_scatter.h"

#include "collectives/algorithms/ring.h"

namespace lockstep {

absl::Status RingReduceScatter(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op) {
  return RunRing(ctx, buffer, op, RingPhases::kReduceScatter);
}

absl::Status RingReduceScatter(AlgorithmContext& ctx, const Tensor& input, const Tensor& buffer, ReduceOp op) {
  if (input.numel() != buffer.numel() || input.dtype() != buffer.dtype()) {
    return absl::InvalidArgumentError("RingReduceScatter: input and buffer differ in size or dtype");
  }
  return RunRing(ctx, buffer, op, RingPhases::kReduceScatter, &input);
}

absl::Status RingReduceScatterV(AlgorithmContext& ctx, const Tensor& input, const Tensor& buffer,
                                absl::Span<const Chunk> blocks, ReduceOp op) {
  if (input.numel() != buffer.numel() || input.dtype() != buffer.dtype()) {
    return absl::InvalidArgumentError("RingReduceScatterV: input and buffer differ in size or dtype");
  }
  if (static_cast<int>(blocks.size()) != ctx.size()) {
    return absl::InvalidArgumentError("RingReduceScatterV: one block per rank expected");
  }
  return RunRing(ctx, buffer, op, RingPhases::kReduceScatter, &input, blocks);
}

}  // namespace lockstep
