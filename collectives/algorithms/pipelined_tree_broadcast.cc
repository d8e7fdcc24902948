#include "collectives/algorithms/pipelined_tree_broadcast.h"

#include <algorithm>

#include "core/status.h"

namespace lockstep {

absl::Status PipelinedTreeBroadcast(AlgorithmContext& ctx, const Tensor& buffer, int root, int chunks) {
  const int n = ctx.size();
  const int64_t count = buffer.numel();
  if (n == 1 || count == 0) return absl::OkStatus();
  const int k = static_cast<int>(std::clamp<int64_t>(chunks, 1, count));
  const BinaryTree tree(n, ctx.rank(), root);
  const size_t element = buffer.element_size();
  const int steps = tree.height + k - 1;
  Transfer transfers[3];
  for (int t = 0; t < steps; ++t) {
    const MessageTag tag = ctx.NextTag();  // Step t uses tag t on every rank.
    int m = 0;
    const int in = t - tree.depth + 1, out = t - tree.depth;
    if (tree.parent >= 0 && in >= 0 && in < k) {
      const Chunk c = ChunkOf(count, k, in);
      transfers[m++] = Transfer::Recv(tree.parent, BytePtr(buffer, c.offset), c.count * element);
    }
    if (out >= 0 && out < k) {
      const Chunk c = ChunkOf(count, k, out);
      for (int i = 0; i < tree.num_children; ++i) {
        transfers[m++] = Transfer::Send(tree.children[i], BytePtr(buffer, c.offset), c.count * element);
      }
    }
    if (m > 0) LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange({transfers, static_cast<size_t>(m)}, tag, ctx.deadline));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
