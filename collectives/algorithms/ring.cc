#include "collectives/algorithms/ring.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/kernels.h"
#include "core/status.h"

namespace lockstep {
namespace {

// In-place receives stage this much at a time: it stays in the L1/L2 cache.
constexpr size_t kRingStageBytes = 32 << 10;

}  // namespace

absl::Status RunRing(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op, RingPhases phases, const Tensor* input,
                     absl::Span<const Chunk> chunks) {
  const int n = ctx.size(), r = ctx.rank();
  if (!chunks.empty() && (static_cast<int>(chunks.size()) != n || TotalOf(chunks) != buffer.numel())) {
    return absl::InvalidArgumentError("RunRing: the chunks do not tile the buffer, one per rank");
  }
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
  auto chunk_of = [&](int i) { return chunks.empty() ? ChunkOf(count, n, i) : chunks[i]; };
  // The chunk message j sends and the one it receives.
  auto sent_chunk = [&](int j) { return j < rs_steps ? mod(r - j - 1) : mod(r - (j - rs_steps)); };
  auto received_chunk = [&](int j) { return j < rs_steps ? mod(r - j - 2) : mod(r - (j - rs_steps) - 1); };

  // A transport that hands received bytes over where they lie (shared
  // memory) lets the reductions read them through a small, cache-resident
  // staging tensor instead of a whole chunk's scratch: no chunk-sized copy
  // goes through memory.
  const bool in_place = reduce_scatter && ctx.transport.ConsumesInPlace();
  Tensor scratch;
  if (reduce_scatter) {
    int64_t largest = 0;
    for (int i = 0; i < n; ++i) largest = std::max(largest, chunk_of(i).count);
    const int64_t stage = std::max<int64_t>(1, static_cast<int64_t>(kRingStageBytes / element));
    LOCKSTEP_ASSIGN_OR_RETURN(scratch,
                              ctx.ScratchTensor(0, in_place ? std::min(largest, stage) : largest, buffer.dtype()));
  }
  // In-place receives: the bytes of an element split between two pieces.
  char carry[16];
  size_t carry_bytes = 0;
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
    const Chunk out = chunk_of(sent_chunk(j));
    Transfer send = Transfer::Send(right, BytePtr(j == 0 ? source : buffer, out.offset), out.count * element);
    send.tag = base_tag + j;
    if (j > 0) send.ready = [&final_bytes, j] { return final_bytes[j - 1]; };
    transfers.push_back(std::move(send));
  }
  for (int j = 0; j < messages; ++j) {
    const Chunk in = chunk_of(received_chunk(j));
    const bool reduces = j < rs_steps;
    const bool last_reduction = j == rs_steps - 1;
    Transfer recv = Transfer::Recv(
        left, reduces ? (in_place ? nullptr : scratch.raw_data()) : BytePtr(buffer, in.offset), in.count * element);
    recv.tag = base_tag + j;
    recv.segment_bytes = segment;
    // Reduces the `len` whole elements staged in scratch[0, len) into
    // element `first` of the chunk.
    auto reduce_staged = [&, in](int64_t first, int64_t len) -> absl::Status {
      if (input != nullptr) {
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine, input->Flat(in.offset + first, len));
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor theirs, scratch.Flat(0, len));
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor result, buffer.Flat(in.offset + first, len));
        const Tensor operands[] = {mine, theirs};
        return Reduce(StepOp(op), operands, result);
      }
      return ReduceRange(op, scratch, 0, buffer, in.offset + first, len);
    };
    if (reduces && in_place) {
      recv.consume = [&, in, reduce_staged](size_t offset, const void* bytes, size_t length) -> absl::Status {
        const char* p = static_cast<const char*>(bytes);
        if (carry_bytes > 0) {  // Complete the element the last piece began.
          const size_t take = std::min(element - carry_bytes, length);
          std::memcpy(carry + carry_bytes, p, take);
          carry_bytes += take;
          p += take;
          offset += take;
          length -= take;
          if (carry_bytes < element) return absl::OkStatus();
          std::memcpy(scratch.raw_data(), carry, element);
          carry_bytes = 0;
          LOCKSTEP_RETURN_IF_ERROR(reduce_staged(static_cast<int64_t>(offset / element) - 1, 1));
        }
        // Aligned pieces (the usual case) are reduced straight from where
        // the transport left them, already in the cache.
        if (length >= element && reinterpret_cast<uintptr_t>(p) % element == 0) {
          const int64_t len = static_cast<int64_t>(length / element);
          const size_t len_bytes = static_cast<size_t>(len) * element;
          const int64_t at = in.offset + static_cast<int64_t>(offset / element);
          char* result = BytePtr(buffer, at);
          LOCKSTEP_RETURN_IF_ERROR(
              ReduceHost(StepOp(op), buffer.dtype(), input != nullptr ? BytePtr(*input, at) : result, p, result, len));
          p += len_bytes;
          offset += len_bytes;
          length -= len_bytes;
        }
        const int64_t stage = scratch.numel();
        while (length >= element) {
          const int64_t len = std::min(static_cast<int64_t>(length / element), stage);
          const size_t len_bytes = static_cast<size_t>(len) * element;
          std::memcpy(scratch.raw_data(), p, len_bytes);
          LOCKSTEP_RETURN_IF_ERROR(reduce_staged(static_cast<int64_t>(offset / element), len));
          p += len_bytes;
          offset += len_bytes;
          length -= len_bytes;
        }
        std::memcpy(carry, p, length);
        carry_bytes = length;
        return absl::OkStatus();
      };
    }
    recv.on_segment = [&, j, in, reduces, last_reduction](size_t offset, size_t length) -> absl::Status {
      const int64_t first = static_cast<int64_t>(offset / element);
      const int64_t len = static_cast<int64_t>(length / element);
      if (reduces && in_place) {
        // Already reduced as it was consumed.
      } else if (reduces && input != nullptr) {
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
