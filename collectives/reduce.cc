#include "collectives/reduce.h"

#include "core/kernels.h"
#include "core/status.h"

namespace lockstep {

absl::Status BinomialReduce(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op, int root) {
  const int n = ctx.size(), r = ctx.rank();
  const int v = (r - root + n) % n;
  const size_t bytes = buffer.nbytes();
  int rounds = 0;
  while ((1 << rounds) < n) ++rounds;
  Tensor child;
  for (int k = rounds - 1; k >= 0; --k) {
    const MessageTag tag = ctx.NextTag();
    const int step = 1 << k;
    if (v < step && v + step < n) {
      if (!child.defined()) {
        LOCKSTEP_ASSIGN_OR_RETURN(child, ctx.ScratchTensor(0, buffer.numel(), buffer.dtype()));
      }
      Transfer t = Transfer::Recv((v + step + root) % n, child.raw_data(), bytes);
      LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange({&t, 1}, tag, ctx.deadline));
      LOCKSTEP_RETURN_IF_ERROR(ReduceInto(StepOp(op), child, buffer));
    } else if (v >= step && v < 2 * step) {
      Transfer t = Transfer::Send((v - step + root) % n, buffer.raw_data(), bytes);
      LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange({&t, 1}, tag, ctx.deadline));
    }
  }
  if (r == root) LOCKSTEP_RETURN_IF_ERROR(FinishAverage(op, buffer, n));
  return absl::OkStatus();
}

}  // namespace lockstep
