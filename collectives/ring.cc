#include "collectives/ring.h"

#include <algorithm>
#include <vector>

#include "core/kernels.h"
#include "core/status.h"

namespace lockstep {

absl::Status RunRing(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op, RingPhases phases,
                     const Tensor* input) {
  const int n = ctx.size(), r = ctx.rank();
  if (n == 1 || buffer.numel() == 0) {
    // Alone, the result is this rank's own data.
    if (input != nullptr && buffer.numel() > 0) return buffer.CopyFrom(*input);
    return absl::OkStatus();
  }
  const int64_t count = buffer.numel();
  const size_t element = buffer.element_size();
  const size_t segment = std::max<size_t>(element, ctx.segment_bytes / element * element);
  const bool reduce_scatter = phases != RingPhases::kAllGather;
  const bool all_gather = phases != RingPhases::kReduceScatter;
  const int rs_steps = reduce_scatter ? n - 1 : 0;
  const int messages = rs_steps + (all_gather ? n - 1 : 0);
  auto mod = [n](int x) { return ((x % n) + n) % n; };
  // The chunk message j sends and the one it receives.
  auto sent_chunk = [&](int j) { return j < rs_steps ? mod(r - j - 1) : mod(r - (j - rs_steps)); };
  auto received_chunk = [&](int j) { return j < rs_steps ? mod(r - j - 2) : mod(r - (j - rs_steps) - 1); };

  Tensor scratch;
  if (reduce_scatter) {
    int64_t largest = 0;
    for (int i = 0; i < n; ++i) largest = std::max(largest, ChunkOf(count, n, i).count);
    LOCKSTEP_ASSIGN_OR_RETURN(scratch, ctx.ScratchTensor(0, largest, buffer.dtype()));
  }
  // final_bytes[j]: bytes of message j's chunk that are final (received, and
  // reduced in the reduce-scatter phase) and may be sent on by message j+1.
  std::vector<size_t> final_bytes(messages, 0);
  std::vector<Transfer> transfers;
  transfers.reserve(2 * messages);
  const int right = mod(r + 1), left = mod(r - 1);
  const uint32_t base_tag = ctx.NextTag().tag;
  // With a separate input, the first message sends the input's chunk and
  // each reduction reads it: the input is never copied.
  const Tensor& source = input != nullptr ? *input : buffer;
  for (int j = 0; j < messages; ++j) {
    const Chunk out = ChunkOf(count, n, sent_chunk(j));
    Transfer send = Transfer::Send(right, BytePtr(j == 0 ? source : buffer, out.offset), out.count * element);
    send.tag = base_tag + j;
    if (j > 0) send.ready = [&final_bytes, j] { return final_bytes[j - 1]; };
    transfers.push_back(std::move(send));
  }
  for (int j = 0; j < messages; ++j) {
    const Chunk in = ChunkOf(count, n, received_chunk(j));
    const bool reduces = j < rs_steps;
    const bool last_reduction = j == rs_steps - 1;
    Transfer recv = Transfer::Recv(left, reduces ? scratch.raw_data() : BytePtr(buffer, in.offset), in.count * element);
    recv.tag = base_tag + j;
    recv.segment_bytes = segment;
    recv.on_segment = [&, j, in, reduces, last_reduction](size_t offset, size_t length) -> absl::Status {
      const int64_t first = static_cast<int64_t>(offset / element);
      const int64_t len = static_cast<int64_t>(length / element);
      if (reduces && input != nullptr) {
        // buffer = op(input, received): the same operand order as in place.
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine, input->Flat(in.offset + first, len));
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor theirs, scratch.Flat(first, len));
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor result, buffer.Flat(in.offset + first, len));
        const Tensor operands[] = {mine, theirs};
        if (len > 0) LOCKSTEP_RETURN_IF_ERROR(Reduce(StepOp(op), operands, result));
      } else if (reduces) {
        LOCKSTEP_RETURN_IF_ERROR(ReduceRange(op, scratch, first, buffer, in.offset + first, len));
      }
      if (last_reduction && op == ReduceOp::kAvg && len > 0) {
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor done, buffer.Flat(in.offset + first, len));
        LOCKSTEP_RETURN_IF_ERROR(FinishAverage(op, done, n));
      }
      final_bytes[j] = offset + length;
      return absl::OkStatus();
    };
    transfers.push_back(std::move(recv));
  }
  // Tags base_tag .. base_tag + messages - 1 are used by this call.
  ctx.next_tag = base_tag + messages;
  return ctx.transport.Exchange(absl::MakeSpan(transfers), MessageTag{ctx.seq, base_tag, ctx.element}, ctx.deadline);
}

}  // namespace lockstep
