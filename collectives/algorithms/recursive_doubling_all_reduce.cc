#include "collectives/algorithms/recursive_doubling_all_reduce.h"

#include <cstring>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "core/dtype.h"
#include "core/kernels.h"
#include "core/status.h"

namespace lockstep {

namespace {

// A receive from the partner that leaves `buffer` = op(lower, higher).
// Over a transport that consumes in place (shared memory) the partner's
// bytes are reduced where they lie, as they come: no copy into a scratch
// tensor and no second pass over it. A piece is reduced into `buffer` only
// once our own send of `buffer` (if any) has completed, so the partner
// never gets reduced data; earlier pieces, and pieces that split an element
// (none in practice: the transport hands over whole cache lines), are
// copied into the scratch tensor (taken only then) and reduced at the end.
class CombiningReceive {
 public:
  // `sending`: `buffer` is being sent in the same exchange; the send's
  // on_done must call SendDone(). Init() makes `transfer` (a default
  // Transfer, the caller's, living as long as this) the receive.
  CombiningReceive(AlgorithmContext& ctx, ReduceOp op, const Tensor& buffer, int partner, bool sending)
      : ctx_(ctx),
        op_(op),
        buffer_(buffer),
        partner_(partner),
        mine_first_(ctx.rank() < partner),
        element_(DTypeSize(buffer.dtype())),
        in_place_(ctx.transport.ConsumesInPlace()),
        send_done_(!sending) {}

  // Filled in place: a Transfer (six std::functions) is not built twice
  // per operation.
  absl::Status Init(Transfer& transfer) {
    transfer.kind = Transfer::Kind::kRecv;
    transfer.peer = partner_;
    transfer.bytes = buffer_.nbytes();
    if (!in_place_) {
      LOCKSTEP_RETURN_IF_ERROR(TakeScratch());
      transfer.data = theirs_.raw_data();
      return absl::OkStatus();
    }
    transfer.data = nullptr;
    transfer.consume = [this](size_t offset, const void* bytes, size_t length) {
      return Consume(offset, bytes, length);
    };
    return absl::OkStatus();
  }

  void SendDone() { send_done_ = true; }

  // After the exchange: whatever is not reduced yet.
  absl::Status Finish() {
    if (!in_place_) return ReduceOrdered(op_, buffer_, theirs_, mine_first_);
    for (const auto& [begin, end] : staged_) {
      const int64_t first = static_cast<int64_t>(begin / element_);
      const int64_t last = static_cast<int64_t>((end + element_ - 1) / element_);
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine, buffer_.Flat(first, last - first));
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor theirs, theirs_.Flat(first, last - first));
      LOCKSTEP_RETURN_IF_ERROR(ReduceOrdered(op_, mine, theirs, mine_first_));
    }
    return absl::OkStatus();
  }

 private:
  absl::Status TakeScratch() {
    if (theirs_.defined()) return absl::OkStatus();
    LOCKSTEP_ASSIGN_OR_RETURN(theirs_, ctx_.ScratchTensor(0, buffer_.numel(), buffer_.dtype()));
    return absl::OkStatus();
  }

  absl::Status Consume(size_t offset, const void* bytes, size_t length) {
    if (send_done_ && offset % element_ == 0 && length % element_ == 0 &&
        reinterpret_cast<uintptr_t>(bytes) % element_ == 0) {
      char* mine = static_cast<char*>(buffer_.raw_data()) + offset;
      const void* first = mine_first_ ? static_cast<const void*>(mine) : bytes;
      const void* second = mine_first_ ? bytes : static_cast<const void*>(mine);
      return ReduceHost(StepOp(op_), buffer_.dtype(), first, second, mine, static_cast<int64_t>(length / element_));
    }
    LOCKSTEP_RETURN_IF_ERROR(TakeScratch());
    std::memcpy(static_cast<char*>(theirs_.raw_data()) + offset, bytes, length);
    if (!staged_.empty() && staged_.back().second == offset) {
      staged_.back().second += length;
    } else {
      staged_.emplace_back(offset, offset + length);
    }
    return absl::OkStatus();
  }

  AlgorithmContext& ctx_;
  const ReduceOp op_;
  const Tensor& buffer_;
  const int partner_;
  const bool mine_first_;
  const size_t element_;
  const bool in_place_;
  bool send_done_;
  Tensor theirs_;  // Scratch, taken when first needed.
  // Byte ranges copied into theirs_ (whole elements are never split
  // between a reduced piece and a staged one).
  absl::InlinedVector<std::pair<size_t, size_t>, 2> staged_;
};

}  // namespace

absl::Status RecursiveDoublingAllReduce(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op) {
  const int n = ctx.size(), r = ctx.rank();
  if (n == 1) return absl::OkStatus();
  const size_t bytes = buffer.nbytes();
  const PowerOfTwoFold fold(n, r);
  // Fold the first 2*extra ranks in pairs.
  const MessageTag fold_tag = ctx.NextTag();
  if (fold.paired()) {
    if (fold.folded_away()) {
      Transfer t = Transfer::Send(r + 1, buffer.raw_data(), bytes);
      LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange({&t, 1}, fold_tag, ctx.deadline));
    } else {
      CombiningReceive receive(ctx, op, buffer, r - 1, /*sending=*/false);
      Transfer t;
      LOCKSTEP_RETURN_IF_ERROR(receive.Init(t));
      LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange({&t, 1}, fold_tag, ctx.deadline));
      LOCKSTEP_RETURN_IF_ERROR(receive.Finish());
    }
  }
  const int vrank = fold.vrank;
  for (int mask = 1; mask < fold.p; mask <<= 1) {
    const MessageTag tag = ctx.NextTag();
    if (vrank < 0) continue;  // Folded ranks skip the doubling rounds (but keep the tag count).
    const int partner = fold.RealRank(vrank ^ mask);
    CombiningReceive receive(ctx, op, buffer, partner, /*sending=*/true);
    Transfer transfers[2] = {Transfer::Send(partner, buffer.raw_data(), bytes), Transfer()};
    LOCKSTEP_RETURN_IF_ERROR(receive.Init(transfers[1]));
    transfers[0].on_done = [&receive] {
      receive.SendDone();
      return absl::OkStatus();
    };
    LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange(transfers, tag, ctx.deadline));
    LOCKSTEP_RETURN_IF_ERROR(receive.Finish());
  }
  if (vrank >= 0) LOCKSTEP_RETURN_IF_ERROR(FinishAverage(op, buffer, n));
  // Unfold: odd ranks hand the result back to their even neighbour.
  const MessageTag unfold_tag = ctx.NextTag();
  if (fold.paired()) {
    Transfer t =
        r % 2 == 1 ? Transfer::Send(r - 1, buffer.raw_data(), bytes) : Transfer::Recv(r + 1, buffer.raw_data(), bytes);
    LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange({&t, 1}, unfold_tag, ctx.deadline));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
