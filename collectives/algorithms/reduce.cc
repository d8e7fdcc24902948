#include "collectives/algorithms/reduce.h"

#include "collectives/algorithms/pipelined_tree_reduce.h"
#include "core/kernels.h"
#include "core/status.h"

namespace lockstep {

absl::Status ReduceTo(AlgorithmContext& ctx, const Tensor& input, const Tensor& output, ReduceOp op, int root) {
  const double bytes = static_cast<double>(input.nbytes());
  if (UsePipelinedTree(ctx.all_reduce, ctx.link, bytes, input.numel(), ctx.size(), /*reduce=*/true)) {
    return PipelinedTreeReduce(ctx, input, output, op, root,
                               PipelinedTreeChunks(ctx.link, bytes, ctx.size(), input.numel(), true));
  }
  // The binomial tree writes non-roots' partial results to scratch itself.
  return BinomialReduce(ctx, input, ctx.rank() == root ? output : Tensor(), op, root);
}

absl::Status BinomialReduce(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op, int root) {
  return BinomialReduce(ctx, buffer, buffer, op, root);
}

absl::Status BinomialReduce(AlgorithmContext& ctx, const Tensor& input, const Tensor& output, ReduceOp op, int root) {
  const int n = ctx.size(), r = ctx.rank();
  const int v = (r - root + n) % n;
  const size_t bytes = input.nbytes();
  int rounds = 0;
  while ((1 << rounds) < n) ++rounds;
  // `partial` holds this rank's data combined with its children's so far:
  // the input itself until the first child's data arrives.
  Tensor partial = input;
  Tensor child;
  for (int k = rounds - 1; k >= 0; --k) {
    const MessageTag tag = ctx.NextTag();
    const int step = 1 << k;
    if (v < step && v + step < n) {
      if (!child.defined()) {
        LOCKSTEP_ASSIGN_OR_RETURN(child, ctx.ScratchTensor(0, input.numel(), input.dtype()));
      }
      Transfer t = Transfer::Recv((v + step + root) % n, child.raw_data(), bytes);
      LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange({&t, 1}, tag, ctx.deadline));
      if (partial.raw_data() == input.raw_data() && input.raw_data() != output.raw_data()) {
        // First child: combine out of place, into the output or a scratch.
        Tensor target = output;
        if (r != root || !target.defined()) {
          LOCKSTEP_ASSIGN_OR_RETURN(target, ctx.ScratchTensor(1, input.numel(), input.dtype()));
        }
        const Tensor operands[] = {input, child};
        LOCKSTEP_RETURN_IF_ERROR(Reduce(StepOp(op), operands, target));
        partial = target;
      } else {
        LOCKSTEP_RETURN_IF_ERROR(ReduceInto(StepOp(op), child, partial));
      }
    } else if (v >= step && v < 2 * step) {
      Transfer t = Transfer::Send((v - step + root) % n, partial.raw_data(), bytes);
      LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange({&t, 1}, tag, ctx.deadline));
    }
  }
  if (r != root) return absl::OkStatus();
  // A root without children (one rank) still owes the output a copy.
  if (partial.raw_data() != output.raw_data()) LOCKSTEP_RETURN_IF_ERROR(output.CopyFrom(partial));
  return FinishAverage(op, output, n);
}

}  // namespace lockstep
