#include "collectives/recursive_doubling_all_reduce.h"

#include "core/kernels.h"
#include "core/status.h"

namespace lockstep {

namespace {

// buffer = op(lower-ranked data, higher-ranked data), whichever side we are.
absl::Status Combine(ReduceOp op, const Tensor& buffer, const Tensor& theirs, bool mine_first) {
  if (mine_first) return ReduceInto(StepOp(op), theirs, buffer);
  const Tensor inputs[] = {theirs, buffer};
  return Reduce(StepOp(op), inputs, buffer);
}

}  // namespace

absl::Status RecursiveDoublingAllReduce(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op) {
  const int n = ctx.size(), r = ctx.rank();
  if (n == 1) return absl::OkStatus();
  const size_t bytes = buffer.nbytes();
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor theirs, ctx.ScratchTensor(0, buffer.numel(), buffer.dtype()));
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int extra = n - p;
  // Fold the first 2*extra ranks in pairs.
  int vrank;
  const MessageTag fold_tag = ctx.NextTag();
  if (r < 2 * extra) {
    if (r % 2 == 0) {
      Transfer t = Transfer::Send(r + 1, buffer.raw_data(), bytes);
      LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange({&t, 1}, fold_tag, ctx.deadline));
      vrank = -1;
    } else {
      Transfer t = Transfer::Recv(r - 1, theirs.raw_data(), bytes);
      LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange({&t, 1}, fold_tag, ctx.deadline));
      LOCKSTEP_RETURN_IF_ERROR(Combine(op, buffer, theirs, /*mine_first=*/false));
      vrank = r / 2;
    }
  } else {
    vrank = r - extra;
  }
  auto real_rank = [&](int v) { return v < extra ? 2 * v + 1 : v + extra; };
  for (int mask = 1; mask < p; mask <<= 1) {
    const MessageTag tag = ctx.NextTag();
    if (vrank < 0) continue;  // Folded ranks skip the doubling rounds (but keep the tag count).
    const int partner = real_rank(vrank ^ mask);
    Transfer transfers[2] = {Transfer::Send(partner, buffer.raw_data(), bytes),
                             Transfer::Recv(partner, theirs.raw_data(), bytes)};
    LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange(transfers, tag, ctx.deadline));
    LOCKSTEP_RETURN_IF_ERROR(Combine(op, buffer, theirs, /*mine_first=*/r < partner));
  }
  if (vrank >= 0) LOCKSTEP_RETURN_IF_ERROR(FinishAverage(op, buffer, n));
  // Unfold: odd ranks hand the result back to their even neighbour.
  const MessageTag unfold_tag = ctx.NextTag();
  if (r < 2 * extra) {
    Transfer t = r % 2 == 1 ? Transfer::Send(r - 1, buffer.raw_data(), bytes)
                            : Transfer::Recv(r + 1, buffer.raw_data(), bytes);
    LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange({&t, 1}, unfold_tag, ctx.deadline));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
