#include "collectives/algorithms/bruck_all_gather.h"

#include <cstring>
#include <vector>

#include "core/status.h"

namespace lockstep {

absl::Status BruckAllGather(AlgorithmContext& ctx, const Tensor& buffer) {
  std::vector<Chunk> blocks;
  blocks.reserve(static_cast<size_t>(ctx.size()));
  for (int i = 0; i < ctx.size(); ++i) blocks.push_back(ChunkOf(buffer.numel(), ctx.size(), i));
  return BruckAllGatherV(ctx, buffer, blocks);
}

absl::Status BruckAllGatherV(AlgorithmContext& ctx, const Tensor& buffer, absl::Span<const Chunk> blocks) {
  const int n = ctx.size(), r = ctx.rank();
  if (static_cast<int>(blocks.size()) != n) {
    return absl::InvalidArgumentError("BruckAllGatherV: one block per rank expected");
  }
  if (n == 1) return absl::OkStatus();
  const size_t element = buffer.element_size();
  // at[i]: where block (r + i) % n starts in the rotated scratch, in elements.
  std::vector<int64_t> at(static_cast<size_t>(n) + 1, 0);
  for (int i = 0; i < n; ++i) at[i + 1] = at[i] + blocks[(r + i) % n].count;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor rotated, ctx.ScratchTensor(0, at[n], buffer.dtype()));
  if (blocks[r].count > 0) {
    std::memcpy(rotated.raw_data(), BytePtr(buffer, blocks[r].offset), blocks[r].count * element);
  }
  for (int have = 1; have < n; have <<= 1) {
    const int take = have < n - have ? have : n - have;
    Transfer transfers[2] = {
        Transfer::Send((r - have + n) % n, rotated.raw_data(), at[take] * element),
        Transfer::Recv((r + have) % n, BytePtr(rotated, at[have]), (at[have + take] - at[have]) * element)};
    LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange(transfers, ctx.NextTag(), ctx.deadline));
  }
  for (int i = 1; i < n; ++i) {
    const Chunk& b = blocks[(r + i) % n];
    if (b.count > 0) std::memcpy(BytePtr(buffer, b.offset), BytePtr(rotated, at[i]), b.count * element);
  }
  return absl::OkStatus();
}

}  // namespace lockstep
