#include "collectives/algorithms/scatter.h"

#include <vector>

#include "core/status.h"

namespace lockstep {

absl::Status DirectScatter(AlgorithmContext& ctx, const Tensor& slots, const Tensor& mine, int root) {
  const int n = ctx.size();
  std::vector<Chunk> blocks;
  blocks.reserve(n);
  for (int i = 0; i < n; ++i) blocks.push_back(Chunk{i * mine.numel(), mine.numel()});
  return DirectScatterV(ctx, slots, mine, blocks, root);
}

absl::Status DirectScatterV(AlgorithmContext& ctx, const Tensor& slots, const Tensor& mine,
                            absl::Span<const Chunk> blocks, int root) {
  const int n = ctx.size(), r = ctx.rank();
  if (static_cast<int>(blocks.size()) != n || blocks[r].count != mine.numel()) {
    return absl::InvalidArgumentError("DirectScatterV: one block per rank, this rank's as large as its output");
  }
  const size_t element = mine.element_size();
  const MessageTag tag = ctx.NextTag();
  if (r != root) {
    Transfer t = Transfer::Recv(root, mine.raw_data(), mine.nbytes());
    return ctx.transport.Exchange({&t, 1}, tag, ctx.deadline);
  }
  std::vector<Transfer> transfers;
  for (int i = 0; i < n; ++i) {
    if (i == r) continue;
    transfers.push_back(Transfer::Send(i, BytePtr(slots, blocks[i].offset), blocks[i].count * element));
  }
  if (mine.numel() > 0) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor own, slots.Flat(blocks[r].offset, blocks[r].count));
    LOCKSTEP_RETURN_IF_ERROR(mine.CopyFrom(own));
  }
  return ctx.transport.Exchange(absl::MakeSpan(transfers), tag, ctx.deadline);
}

}  // namespace lockstep
