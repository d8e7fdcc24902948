#include "collectives/algorithms/recursive_halving_reduce_scatter.h"

#include "core/status.h"

namespace lockstep {
namespace {

// The first real rank that virtual rank v stands for (v = p: n, the end).
int FirstReal(const PowerOfTwoFold& fold, int v) { return v < fold.extra ? 2 * v : v + fold.extra; }

}  // namespace

absl::Status RecursiveHalvingReduceScatter(AlgorithmContext& ctx, const Tensor& input, const Tensor& buffer,
                                           ReduceOp op) {
  if (input.numel() != buffer.numel() || input.dtype() != buffer.dtype()) {
    return absl::InvalidArgumentError("RecursiveHalvingReduceScatter: input and buffer differ in size or dtype");
  }
  const int n = ctx.size(), r = ctx.rank();
  const int64_t count = buffer.numel();
  const size_t element = buffer.element_size();
  if (!buffer.SharesStorageWith(input) || buffer.raw_data() != input.raw_data()) {
    LOCKSTEP_RETURN_IF_ERROR(buffer.CopyFrom(input));
  }
  if (n == 1) return absl::OkStatus();
  const PowerOfTwoFold fold(n, r);
  const int p = fold.p;
  // Virtual ranks [lo, hi) as the elements of their real ranks' chunks
  // (the map is monotone, so a window is one range).
  auto range = [&](int lo, int hi) {
    const int64_t begin = ChunkOf(count, n, FirstReal(fold, lo)).offset;
    const int64_t end = hi == p ? count : ChunkOf(count, n, FirstReal(fold, hi)).offset;
    return Chunk{begin, end - begin};
  };

  LOCKSTEP_RETURN_IF_ERROR(FoldPairs(ctx, fold, buffer, op));

  // Halving, farthest partner first, so that the window left at the end
  // is this virtual rank's own.
  int lo = 0, hi = p;
  for (int mask = p >> 1; mask >= 1; mask >>= 1) {
    const MessageTag tag = ctx.NextTag();
    if (fold.folded_away()) continue;  // Tags stay in step on every rank.
    const int partner_v = fold.vrank ^ mask;
    const int mid = lo + mask;
    const bool low_half = fold.vrank < mid;
    const Chunk keep = low_half ? range(lo, mid) : range(mid, hi);
    const Chunk give = low_half ? range(mid, hi) : range(lo, mid);
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor theirs, ctx.ScratchTensor(0, keep.count, buffer.dtype()));
    Transfer transfers[2] = {
        Transfer::Send(fold.RealRank(partner_v), BytePtr(buffer, give.offset), give.count * element),
        Transfer::Recv(fold.RealRank(partner_v), theirs.raw_data(), keep.count * element)};
    LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange(transfers, tag, ctx.deadline));
    if (keep.count > 0) {
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine, buffer.Flat(keep.offset, keep.count));
      LOCKSTEP_RETURN_IF_ERROR(ReduceOrdered(op, mine, theirs, fold.vrank < partner_v));
    }
    if (low_half) {
      hi = mid;
    } else {
      lo = mid;
    }
  }

  // Unfold: the odd rank of a pair holds both ranks' chunks.
  const MessageTag unfold_tag = ctx.NextTag();
  const Chunk own = ChunkOf(count, n, r);
  if (fold.folded_away()) {
    Transfer t = Transfer::Recv(r + 1, BytePtr(buffer, own.offset), own.count * element);
    LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange({&t, 1}, unfold_tag, ctx.deadline));
  } else if (fold.paired()) {
    const Chunk theirs = ChunkOf(count, n, r - 1);
    if (theirs.count > 0) {
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor result, buffer.Flat(theirs.offset, theirs.count));
      LOCKSTEP_RETURN_IF_ERROR(FinishAverage(op, result, n));
    }
    Transfer t = Transfer::Send(r - 1, BytePtr(buffer, theirs.offset), theirs.count * element);
    LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange({&t, 1}, unfold_tag, ctx.deadline));
  }
  if (!fold.folded_away() && own.count > 0) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor result, buffer.Flat(own.offset, own.count));
    LOCKSTEP_RETURN_IF_ERROR(FinishAverage(op, result, n));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
