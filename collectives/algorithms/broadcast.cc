#include "collectives/algorithms/broadcast.h"

#include "collectives/algorithms/pipelined_tree_broadcast.h"
#include "core/status.h"

namespace lockstep {

absl::Status BroadcastFrom(AlgorithmContext& ctx, const Tensor& buffer, int root) {
  const double bytes = static_cast<double>(buffer.nbytes());
  if (UsePipelinedTree(ctx.all_reduce, ctx.link, bytes, buffer.numel(), ctx.size(), /*reduce=*/false)) {
    return PipelinedTreeBroadcast(ctx, buffer, root,
                                  PipelinedTreeChunks(ctx.link, bytes, ctx.size(), buffer.numel(), false));
  }
  return BinomialBroadcast(ctx, buffer, root);
}

absl::Status BinomialBroadcast(AlgorithmContext& ctx, const Tensor& buffer, int root) {
  const int n = ctx.size(), r = ctx.rank();
  const int v = (r - root + n) % n;
  const size_t bytes = buffer.nbytes();
  int rounds = 0;
  while ((1 << rounds) < n) ++rounds;
  for (int k = 0; k < rounds; ++k) {
    const MessageTag tag = ctx.NextTag();  // Round k uses tag k on every rank.
    const int step = 1 << k;
    if (v < step && v + step < n) {
      Transfer t = Transfer::Send((v + step + root) % n, buffer.raw_data(), bytes);
      LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange({&t, 1}, tag, ctx.deadline));
    } else if (v >= step && v < 2 * step) {
      Transfer t = Transfer::Recv((v - step + root) % n, buffer.raw_data(), bytes);
      LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange({&t, 1}, tag, ctx.deadline));
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep
