#include "collectives/algorithms/all_gather.h"

#include "collectives/algorithms/bruck_all_gather.h"
#include "collectives/algorithms/ring.h"

namespace lockstep {

bool UseBruck(AllReduceAlgorithm forced, const LinkConstants& link, double bytes, int p, int ranks_per_host) {
  if (p <= 2) return false;  // One step either way: the ring receives in place.
  if (forced != AllReduceAlgorithm::kAuto) return forced != AllReduceAlgorithm::kRing;
  const double a = link.latency_us, b = link.us_per_byte, g = link.reduce_us_per_byte;
  const double block = bytes / p;
  const double ring = (p - 1) * (a + block * b);
  double bruck = bytes * g;  // The rotation back into place.
  for (int have = 1; have < p; have <<= 1) {
    const int sharing = have < ranks_per_host ? have : ranks_per_host;
    bruck += a + sharing * (have < p - have ? have : p - have) * block * b;
  }
  return bruck < ring;
}

absl::Status AllGather(AlgorithmContext& ctx, const Tensor& buffer) {
  if (UseBruck(ctx.all_reduce, ctx.link, static_cast<double>(buffer.nbytes()), ctx.size(), ctx.ranks_per_host)) {
    return BruckAllGather(ctx, buffer);
  }
  return RingAllGather(ctx, buffer);
}

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
