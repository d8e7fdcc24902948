#include "collectives/algorithms/tree_all_reduce.h"

#include "collectives/algorithms/pipelined_tree_broadcast.h"
#include "collectives/algorithms/pipelined_tree_reduce.h"
#include "core/status.h"

namespace lockstep {

absl::Status TreeAllReduce(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op) {
  const int p = ctx.size();
  const double bytes = static_cast<double>(buffer.nbytes());
  // In place on every rank: partial sums land in `buffer`, which the
  // broadcast then overwrites with rank 0's result.
  LOCKSTEP_RETURN_IF_ERROR(PipelinedTreeReduce(ctx, buffer, buffer, op, /*root=*/0,
                                               PipelinedTreeChunks(ctx.link, bytes, p, buffer.numel(), true)));
  return PipelinedTreeBroadcast(ctx, buffer, /*root=*/0,
                                PipelinedTreeChunks(ctx.link, bytes, p, buffer.numel(), false));
}

}  // namespace lockstep
