#include "collectives/reduce_scatter.h"

#include <algorithm>

#include "core/status.h"

namespace lockstep {

absl::Status RingReduceScatter(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op) {
  const int n = ctx.size(), r = ctx.rank();
  if (n == 1) return absl::OkStatus();
  const int64_t count = buffer.numel();
  const size_t element = buffer.element_size();
  int64_t largest = 0;
  for (int i = 0; i < n; ++i) largest = std::max(largest, ChunkOf(count, n, i).count);
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor scratch, ctx.ScratchTensor(0, largest, buffer.dtype()));
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  const size_t segment = std::max<size_t>(element, ctx.segment_bytes / element * element);
  for (int s = 0; s < n - 1; ++s) {
    const Chunk out = ChunkOf(count, n, ((r - s - 1) % n + n) % n);
    const Chunk in = ChunkOf(count, n, ((r - s - 2) % n + n) % n);
    Transfer transfers[2] = {
        Transfer::Send(right, BytePtr(buffer, out.offset), out.count * element),
        Transfer::Recv(left, scratch.raw_data(), in.count * element),
    };
    transfers[1].segment_bytes = segment;
    transfers[1].on_segment = [&](size_t offset, size_t length) {
      const int64_t first = static_cast<int64_t>(offset / element);
      return ReduceRange(op, scratch, first, buffer, in.offset + first, static_cast<int64_t>(length / element));
    };
    LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange(transfers, ctx.NextTag(), ctx.deadline));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
