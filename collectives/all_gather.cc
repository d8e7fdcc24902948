#include "collectives/all_gather.h"

#include "core/status.h"

namespace lockstep {

absl::Status RingAllGather(AlgorithmContext& ctx, const Tensor& buffer) {
  const int n = ctx.size(), r = ctx.rank();
  if (n == 1) return absl::OkStatus();
  const int64_t count = buffer.numel();
  const size_t element = buffer.element_size();
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  for (int s = 0; s < n - 1; ++s) {
    const Chunk out = ChunkOf(count, n, ((r - s) % n + n) % n);
    const Chunk in = ChunkOf(count, n, ((r - s - 1) % n + n) % n);
    Transfer transfers[2] = {
        Transfer::Send(right, BytePtr(buffer, out.offset), out.count * element),
        Transfer::Recv(left, BytePtr(buffer, in.offset), in.count * element),
    };
    LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange(transfers, ctx.NextTag(), ctx.deadline));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
