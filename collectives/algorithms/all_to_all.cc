#include "collectives/algorithms/all_to_all.h"

#include <algorithm>
#include <vector>

#include "core/status.h"

namespace lockstep {
namespace {

// Steps in flight at once when blocks are large.
constexpr int kLargeWindow = 4;

}  // namespace

absl::Status PairwiseAllToAll(AlgorithmContext& ctx, const Tensor& input, absl::Span<const Chunk> send_blocks,
                              const Tensor& output, absl::Span<const Chunk> recv_blocks) {
  const int n = ctx.size(), r = ctx.rank();
  if (static_cast<int>(send_blocks.size()) != n || static_cast<int>(recv_blocks.size()) != n ||
      send_blocks[r].count != recv_blocks[r].count) {
    return absl::InvalidArgumentError(
        "PairwiseAllToAll: one send and one receive block per rank expected, this rank's two of one size");
  }
  const size_t element = input.element_size();
  if (send_blocks[r].count > 0) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor from, input.Flat(send_blocks[r].offset, send_blocks[r].count));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor to, output.Flat(recv_blocks[r].offset, recv_blocks[r].count));
    LOCKSTEP_RETURN_IF_ERROR(to.CopyFrom(from));
  }
  if (n == 1) return absl::OkStatus();
  int64_t largest = 0;
  for (int i = 0; i < n; ++i) {
    if (i == r) continue;
    largest = std::max({largest, send_blocks[i].count, recv_blocks[i].count});
  }
  const bool small = static_cast<size_t>(largest) * element <= ctx.small_message_bytes;
  const int window = small ? n - 1 : std::min(kLargeWindow, n - 1);
  std::vector<Transfer> transfers;
  transfers.reserve(2 * static_cast<size_t>(window));
  for (int first = 1; first < n; first += window) {
    transfers.clear();
    const int last = std::min(n - 1, first + window - 1);
    for (int s = first; s <= last; ++s) {
      const int to = (r + s) % n, from = (r - s + n) % n;
      transfers.push_back(Transfer::Send(to, BytePtr(input, send_blocks[to].offset), send_blocks[to].count * element));
      transfers.push_back(
          Transfer::Recv(from, BytePtr(output, recv_blocks[from].offset), recv_blocks[from].count * element));
    }
    // One tag per window: within it each peer appears once per direction.
    LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange(absl::MakeSpan(transfers), ctx.NextTag(), ctx.deadline));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
