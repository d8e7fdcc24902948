#include "collectives/algorithms/all_to_all.h"

#include <algorithm>
#include <vector>

#include "collectives/algorithms/bruck_all_to_all.h"
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

bool UseBruckAllToAll(AllReduceAlgorithm forced, const LinkConstants& link, double block_bytes, int p,
                      int ranks_per_host, double ranks_per_core, size_t small_message_bytes) {
  if (p <= 2) return false;  // One partner either way.
  switch (forced) {
    case AllReduceAlgorithm::kAuto:
      break;
    case AllReduceAlgorithm::kRecursiveDoubling:
    case AllReduceAlgorithm::kRabenseifner:
      return true;
    default:
      return false;
  }
  if (block_bytes > static_cast<double>(small_message_bytes)) return false;
  const double a = link.latency_us, b = link.us_per_byte, g = link.reduce_us_per_byte;
  const double o = link.message_us * std::max(1.0, ranks_per_core);
  const double n = p, shared = std::min(ranks_per_host, p);
  const double pairwise = a + 2 * (n - 1) * o + std::max(n - 1, shared * (n - shared)) * block_bytes * b;
  double bruck = 2 * n * block_bytes * g;
  for (int step = 1; step < p; step <<= 1) {
    int slots = 0;
    for (int i = step; i < p; ++i) slots += (i & step) != 0;
    bruck += a + 2 * o + slots * block_bytes * b * std::min(step, ranks_per_host) + n * block_bytes * g;
  }
  return bruck < pairwise;
}

absl::Status AllToAll(AlgorithmContext& ctx, const Tensor& input, absl::Span<const Chunk> send_blocks,
                      const Tensor& output, absl::Span<const Chunk> recv_blocks, bool even) {
  const int n = ctx.size();
  if (even && static_cast<int>(send_blocks.size()) == n && n > 0 &&
      UseBruckAllToAll(ctx.all_reduce, ctx.link, static_cast<double>(send_blocks[0].count * input.element_size()), n,
                       ctx.ranks_per_host, ctx.ranks_per_core, ctx.small_message_bytes)) {
    return BruckAllToAll(ctx, input, output, send_blocks[0].count);
  }
  return PairwiseAllToAll(ctx, input, send_blocks, output, recv_blocks);
}

}  // namespace lockstep
