#include "collectives/algorithms/gather.h"

#include <vector>

#include "core/status.h"

namespace lockstep {

absl::Status DirectGather(AlgorithmContext& ctx, const Tensor& mine, const Tensor& slots, int root) {
  const int n = ctx.size();
  std::vector<Chunk> blocks;
  blocks.reserve(n);
  for (int i = 0; i < n; ++i) blocks.push_back(Chunk{i * mine.numel(), mine.numel()});
  return DirectGatherV(ctx, mine, slots, blocks, root);
}

absl::Status DirectGatherV(AlgorithmContext& ctx, const Tensor& mine, const Tensor& slots,
                           absl::Span<const Chunk> blocks, int root) {
  const int n = ctx.size(), r = ctx.rank();
  if (static_cast<int>(blocks.size()) != n || blocks[r].count != mine.numel()) {
    return absl::InvalidArgumentError("DirectGatherV: one block per rank, this rank's as large as its input");
  }
  const size_t element = mine.element_size();
  const MessageTag tag = ctx.NextTag();
  if (r != root) {
    Transfer t = Transfer::Send(root, mine.raw_data(), mine.nbytes());
    return ctx.transport.Exchange({&t, 1}, tag, ctx.deadline);
  }
  std::vector<Transfer> transfers;
  for (int i = 0; i < n; ++i) {
    if (i == r) continue;
    transfers.push_back(Transfer::Recv(i, BytePtr(slots, blocks[i].offset), blocks[i].count * element));
  }
  if (mine.numel() > 0) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor own, slots.Flat(blocks[r].offset, blocks[r].count));
    LOCKSTEP_RETURN_IF_ERROR(own.CopyFrom(mine));
  }
  return ctx.transport.Exchange(absl::MakeSpan(transfers), tag, ctx.deadline);
}

}  // namespace lockstep
