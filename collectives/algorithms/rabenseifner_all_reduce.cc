#include "collectives/algorithms/rabenseifner_all_reduce.h"

#include <utility>

#include "absl/container/inlined_vector.h"
#include "core/status.h"

namespace lockstep {
namespace {

// Chunks [first, last) of the buffer split p ways, as one element range.
Chunk Window(int64_t count, int p, int first, int last) {
  const int64_t begin = ChunkOf(count, p, first).offset;
  const int64_t end = last == p ? count : ChunkOf(count, p, last).offset;
  return Chunk{begin, end - begin};
}

}  // namespace

absl::Status RabenseifnerAllReduce(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op) {
  const int n = ctx.size(), r = ctx.rank();
  if (n == 1) return absl::OkStatus();
  const int64_t count = buffer.numel();
  const size_t element = buffer.element_size();
  const PowerOfTwoFold fold(n, r);
  const int p = fold.p;

  // Fold: the even rank of each pair hands its whole buffer to the odd one.
  LOCKSTEP_RETURN_IF_ERROR(FoldPairs(ctx, fold, buffer, op));

  // Reduce-scatter by recursive halving. The window [lo, hi) is the chunks
  // this rank still reduces; each step keeps the half that bit `mask` of
  // the virtual rank names and sends the other half to the partner, which
  // keeps that one. The windows are kept for the all-gather's way back.
  absl::InlinedVector<std::pair<int, int>, 16> windows;
  int lo = 0, hi = p;
  for (int mask = 1; mask < p; mask <<= 1) {
    const MessageTag tag = ctx.NextTag();
    if (fold.folded_away()) continue;  // Tags stay in step on every rank.
    const int partner_v = fold.vrank ^ mask;
    const int partner = fold.RealRank(partner_v);
    const int mid = lo + (hi - lo) / 2;
    const bool low_half = (fold.vrank & mask) == 0;
    const Chunk keep = low_half ? Window(count, p, lo, mid) : Window(count, p, mid, hi);
    const Chunk give = low_half ? Window(count, p, mid, hi) : Window(count, p, lo, mid);
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor theirs, ctx.ScratchTensor(0, keep.count, buffer.dtype()));
    Transfer transfers[2] = {Transfer::Send(partner, BytePtr(buffer, give.offset), give.count * element),
                             Transfer::Recv(partner, theirs.raw_data(), keep.count * element)};
    LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange(transfers, tag, ctx.deadline));
    if (keep.count > 0) {
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine, buffer.Flat(keep.offset, keep.count));
      LOCKSTEP_RETURN_IF_ERROR(ReduceOrdered(op, mine, theirs, fold.vrank < partner_v));
    }
    windows.emplace_back(lo, hi);
    if (low_half) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  if (!fold.folded_away()) {
    const Chunk own = Window(count, p, lo, hi);
    if (own.count > 0) {
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine, buffer.Flat(own.offset, own.count));
      LOCKSTEP_RETURN_IF_ERROR(FinishAverage(op, mine, n));
    }
  }

  // All-gather by recursive doubling, the halving's steps in reverse: each
  // step swaps this rank's window for the partner's sibling window.
  for (int step = 0, mask = p >> 1; mask >= 1; mask >>= 1, ++step) {
    const MessageTag tag = ctx.NextTag();
    if (fold.folded_away()) continue;
    const int partner = fold.RealRank(fold.vrank ^ mask);
    const auto [parent_lo, parent_hi] = windows[windows.size() - 1 - step];
    const bool low_half = lo == parent_lo;
    const Chunk mine = Window(count, p, lo, hi);
    const Chunk theirs = low_half ? Window(count, p, hi, parent_hi) : Window(count, p, parent_lo, lo);
    Transfer transfers[2] = {Transfer::Send(partner, BytePtr(buffer, mine.offset), mine.count * element),
                             Transfer::Recv(partner, BytePtr(buffer, theirs.offset), theirs.count * element)};
    LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange(transfers, tag, ctx.deadline));
    lo = parent_lo;
    hi = parent_hi;
  }

  // Unfold: the odd rank of each pair hands the result back.
  const MessageTag unfold_tag = ctx.NextTag();
  if (fold.paired()) {
    Transfer t = fold.folded_away() ? Transfer::Recv(r + 1, buffer.raw_data(), buffer.nbytes())
                                    : Transfer::Send(r - 1, buffer.raw_data(), buffer.nbytes());
    LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange({&t, 1}, unfold_tag, ctx.deadline));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
