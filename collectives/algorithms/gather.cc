#include "collectives/algorithms/gather.h"

#include <vector>

#include "core/status.h"

namespace lockstep {

absl::Status DirectGather(AlgorithmContext& ctx, const Tensor& mine, const Tensor& slots, int root) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t bytes = mine.nbytes();
  const MessageTag tag = ctx.NextTag();
  if (r != root) {
    Transfer t = Transfer::Send(root, mine.raw_data(), bytes);
    return ctx.transport.Exchange({&t, 1}, tag, ctx.deadline);
  }
  std::vector<Transfer> transfers;
  for (int i = 0; i < n; ++i) {
    if (i == r) continue;
    transfers.push_back(Transfer::Recv(i, BytePtr(slots, i * mine.numel()), bytes));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor own, slots.Flat(r * mine.numel(), mine.numel()));
  LOCKSTEP_RETURN_IF_ERROR(own.CopyFrom(mine));
  return ctx.transport.Exchange(absl::MakeSpan(transfers), tag, ctx.deadline);
}

}  // namespace lockstep
