#include "collectives/algorithms/reduce_scatter.h"

#include "collectives/algorithms/recursive_halving_reduce_scatter.h"
#include "collectives/algorithms/ring.h"

namespace lockstep {

bool UseRecursiveHalving(AllReduceAlgorithm forced, const LinkConstants& link, double bytes, int p,
                         int ranks_per_host) {
  if (p <= 2) return false;  // One step either way: the ring copies nothing.
  if (forced != AllReduceAlgorithm::kAuto) return forced != AllReduceAlgorithm::kRing;
  const PowerOfTwoFold shape(p, 0);
  const double a = link.latency_us, b = link.us_per_byte, g = link.reduce_us_per_byte;
  const double ring = (p - 1) * (a + bytes / p * b);
  const double fold = shape.extra > 0 ? 2 * a + bytes * (b + g) + bytes / p * b : 0;
  double halving = bytes * g + fold;  // The copy of the input, the fold.
  double half = bytes;
  for (int distance = shape.p >> 1; distance >= 1; distance >>= 1) {
    half /= 2;
    const int sharing = distance < ranks_per_host ? distance : ranks_per_host;
    halving += a + half * (sharing * b + g);
  }
  return halving < ring;
}

absl::Status ReduceScatter(AlgorithmContext& ctx, const Tensor& input, const Tensor& buffer, ReduceOp op) {
  if (UseRecursiveHalving(ctx.all_reduce, ctx.link, static_cast<double>(input.nbytes()), ctx.size(),
                          ctx.ranks_per_host)) {
    return RecursiveHalvingReduceScatter(ctx, input, buffer, op);
  }
  return RingReduceScatter(ctx, input, buffer, op);
}

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
