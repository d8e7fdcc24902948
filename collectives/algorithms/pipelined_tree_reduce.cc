#include "collectives/algorithms/pipelined_tree_reduce.h"

#include <algorithm>

#include "core/kernels.h"
#include "core/status.h"

namespace lockstep {

absl::Status PipelinedTreeReduce(AlgorithmContext& ctx, const Tensor& input, const Tensor& output, ReduceOp op,
                                 int root, int chunks) {
  const int n = ctx.size(), r = ctx.rank();
  const int64_t count = input.numel();
  if (count == 0) return absl::OkStatus();
  if (r == root && !output.defined()) {
    return absl::InvalidArgumentError("PipelinedTreeReduce: the root needs an output tensor");
  }
  if (n == 1) {
    if (output.raw_data() != input.raw_data()) LOCKSTEP_RETURN_IF_ERROR(output.CopyFrom(input));
    return FinishAverage(op, output, n);
  }
  const int k = static_cast<int>(std::clamp<int64_t>(chunks, 1, count));
  const BinaryTree tree(n, r, root);
  const ReduceOp step_op = StepOp(op);
  const size_t element = input.element_size();
  // `partial`: this rank's chunks combined with its children's; `received`:
  // one chunk from each child per step.
  Tensor partial = input, received;
  const int64_t largest = (count + k - 1) / k;
  if (tree.num_children > 0) {
    if (output.defined()) {
      partial = output;
    } else {
      LOCKSTEP_ASSIGN_OR_RETURN(partial, ctx.ScratchTensor(0, count, input.dtype()));
    }
    LOCKSTEP_ASSIGN_OR_RETURN(received, ctx.ScratchTensor(1, tree.num_children * largest, input.dtype()));
  }
  const int below = tree.height - tree.depth;  // Steps the deepest chunk needs to get here.
  const int steps = tree.height + k - 1;
  Transfer transfers[3];
  for (int t = 0; t < steps; ++t) {
    const MessageTag tag = ctx.NextTag();  // Step t uses tag t on every rank.
    int m = 0;
    const int in = t - (below - 1), out = t - below;
    const bool receiving = tree.num_children > 0 && in >= 0 && in < k;
    const Chunk c_in = ChunkOf(count, k, receiving ? in : 0);
    if (receiving) {
      for (int i = 0; i < tree.num_children; ++i) {
        transfers[m++] = Transfer::Recv(tree.children[i], BytePtr(received, i * largest), c_in.count * element);
      }
    }
    if (tree.parent >= 0 && out >= 0 && out < k) {
      const Chunk c = ChunkOf(count, k, out);
      transfers[m++] = Transfer::Send(tree.parent, BytePtr(partial, c.offset), c.count * element);
    }
    if (m > 0) LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange({transfers, static_cast<size_t>(m)}, tag, ctx.deadline));
    if (!receiving) continue;
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor target, partial.Flat(c_in.offset, c_in.count));
    Tensor operands[3];
    for (int i = 0; i < tree.num_children; ++i) {
      LOCKSTEP_ASSIGN_OR_RETURN(operands[i + 1], received.Flat(i * largest, c_in.count));
    }
    if (partial.raw_data() == input.raw_data()) {  // In place: own chunk is the target.
      for (int i = 0; i < tree.num_children; ++i) {
        LOCKSTEP_RETURN_IF_ERROR(ReduceInto(step_op, operands[i + 1], target));
      }
    } else {
      LOCKSTEP_ASSIGN_OR_RETURN(operands[0], input.Flat(c_in.offset, c_in.count));
      LOCKSTEP_RETURN_IF_ERROR(Reduce(step_op, {operands, static_cast<size_t>(tree.num_children + 1)}, target));
    }
  }
  if (r != root) return absl::OkStatus();
  return FinishAverage(op, output, n);
}

}  // namespace lockstep
