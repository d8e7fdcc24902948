// ShmTransport's copy paths: how one step of a transfer moves bytes through
// the ring (two copies: into it, out of it) or straight from the sender's
// memory (single copy, process_vm_readv). See shm_transport.h.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "collectives/transport/message_header.h"
#include "collectives/transport/shm/shm_copy.h"
#include "collectives/transport/shm/shm_layout.h"
#include "collectives/transport/shm/shm_op.h"
#include "collectives/transport/transfer_streams.h"
#include "collectives/transport/transport_errors.h"
#include "core/status.h"

namespace lockstep {
namespace {

// How much of a newly arrived message is prefetched: a small message whole
// (header and 4 KiB of payload); beyond that the hardware prefetcher keeps
// up with the reduction's sequential reads.
constexpr uint64_t kPrefetchBytes = 64 + 8192;

}  // namespace

using shm_internal::Copy;
using shm_internal::kLine;
using shm_internal::kSingleCopyMagic;
using shm_internal::kSingleCopyPiece;
using shm_internal::kSingleCopyStage;
using shm_internal::PrefetchRing;
using shm_internal::ReadRemote;
using shm_internal::RoundUp;

absl::Status ShmTransport::Op::Step(size_t stream, bool* moved) {
  const size_t i = streams_.current[stream];
  Transfer& t = streams_.at(i);
  Progress& p = streams_.progress[i];
  const MessageTag tag = TagOf(t);
  if (t.kind == Transfer::Kind::kSend && (p.single || (!p.header_done && SendsSingleCopy(t)))) {
    SendSingleCopy(t, p, tag, moved);
  } else if (t.kind == Transfer::Kind::kSend) {
    SendThroughRing(t, p, tag, moved);
  } else {
    LOCKSTEP_RETURN_IF_ERROR(Receive(t, p, tag, moved));
  }
  if (p.header_done && p.done == t.bytes) {
    if (t.kind == Transfer::Kind::kRecv && t.on_segment && t.bytes == 0) {
      LOCKSTEP_RETURN_IF_ERROR(t.on_segment(0, 0));
    }
    streams_.current[stream] = streams_.next[i];
    --streams_.remaining;
    *moved = true;
    if (t.on_done) LOCKSTEP_RETURN_IF_ERROR(t.on_done());
  }
  return absl::OkStatus();
}

void ShmTransport::Op::SendSingleCopy(Transfer& t, Progress& p, const MessageTag& tag, bool* moved) {
  Ring* ring = tr_.RingOf(tr_.rank_, t.peer);
  uint64_t& tail_seen = tr_.tail_seen_[t.peer];
  bool publish = false;
  if (!p.header_done) {
    const uint64_t head = ring->head.load(std::memory_order_relaxed);
    if (capacity_ - (head - tail_seen) < kLine) {
      tail_seen = ring->tail.load(std::memory_order_acquire);
      if (capacity_ - (head - tail_seen) < kLine) return;
    }
    p.single = true;
    p.base = ring->exposed.load(std::memory_order_relaxed);  // Ours alone.
    MessageHeader h = MakeMessageHeader(tag, t.bytes, kSingleCopyMagic);
    h.address = reinterpret_cast<uintptr_t>(t.data);
    h.base = p.base;
    std::memcpy(ring->data() + head % capacity_, &h, sizeof(h));
    ring->head.store(head + kLine, std::memory_order_release);
    p.header_done = true;
    publish = true;
  }
  const size_t allowed = SendableBytes(t);
  if (allowed > p.exposed) {
    p.exposed = allowed;
    ring->exposed.store(p.base + allowed, std::memory_order_release);
    publish = true;
  }
  if (publish) {
    Notify(t.peer);
    *moved = true;
  }
  const size_t acked = static_cast<size_t>(ring->acked.load(std::memory_order_acquire) - p.base);
  if (acked > p.done) {
    tr_.traffic_.Sent(t.peer, acked - p.done);
    p.done = acked;
    *moved = true;
  }
}

void ShmTransport::Op::SendThroughRing(Transfer& t, Progress& p, const MessageTag& tag, bool* moved) {
  Ring* ring = tr_.RingOf(tr_.rank_, t.peer);
  uint64_t& tail_seen = tr_.tail_seen_[t.peer];
  const uint64_t head = ring->head.load(std::memory_order_relaxed);  // Ours alone.
  // The receiver's tail as last seen: reading it costs a cache miss (the
  // receiver wrote it), so it is read again only when the space it leaves
  // is not enough for what this step would write.
  const size_t allowed = SendableBytes(t);
  const int64_t want =
      (p.header_done ? 0 : static_cast<int64_t>(kLine)) + static_cast<int64_t>(std::min(allowed - p.done, slot_));
  int64_t free = static_cast<int64_t>(capacity_) - static_cast<int64_t>(head - tail_seen);
  if (free < want) {
    tail_seen = ring->tail.load(std::memory_order_acquire);
    free = static_cast<int64_t>(capacity_) - static_cast<int64_t>(head - tail_seen);
  }
  uint64_t new_head = head;
  if (!p.header_done) {
    if (free < static_cast<int64_t>(kLine)) return;
    const MessageHeader h = MakeMessageHeader(tag, t.bytes);
    std::memcpy(ring->data() + new_head % capacity_, &h, sizeof(h));
    new_head += kLine;
    free -= kLine;
    p.header_done = true;
  }
  if (p.done < allowed && free > 0) {
    const uint64_t pos = new_head % capacity_;
    const size_t n =
        std::min({allowed - p.done, static_cast<size_t>(free), static_cast<size_t>(capacity_ - pos), slot_});
    Copy(ring->data() + pos, static_cast<const char*>(t.data) + p.done, n,
         t.bytes >= tr_.options_.streaming_send_bytes);
    p.done += n;
    new_head += n;
    tr_.traffic_.Sent(t.peer, n);
  }
  // The end of a message is padded to a cache line: the next header never
  // wraps and payloads stay aligned.
  if (p.done == t.bytes) new_head = RoundUp(new_head, kLine);
  if (new_head != head) {
    ring->head.store(new_head, std::memory_order_release);
    Notify(t.peer);
    *moved = true;
  }
}

absl::Status ShmTransport::Op::Receive(Transfer& t, Progress& p, const MessageTag& tag, bool* moved) {
  Ring* ring = tr_.RingOf(t.peer, tr_.rank_);
  const uint64_t tail = ring->tail.load(std::memory_order_relaxed);  // Ours alone.
  const uint64_t head = ring->head.load(std::memory_order_acquire);
  uint64_t new_tail = tail;
  if (!p.header_done) {
    if (head - tail < kLine) return absl::OkStatus();
    // The message's first lines are in the sender's cache: request them
    // together with the header, whose check would otherwise come first.
    PrefetchRing(ring->data(), capacity_, tail, std::min<uint64_t>(head - tail, kPrefetchBytes));
    MessageHeader h;
    std::memcpy(&h, ring->data() + tail % capacity_, sizeof(h));
    new_tail += kLine;
    p.header_done = true;
    LOCKSTEP_RETURN_IF_ERROR(ReceiveHeader(t, p, tag, h));
    if (t.data == LeaveMessage()) {
      // Not this receive's: the header stays at the ring's tail for the
      // next receive from the peer; this one completes empty.
      p.single = false;
      t.data = nullptr;
      t.bytes = 0;
      *moved = true;
      return absl::OkStatus();
    }
  }
  if (p.single) {
    if (new_tail != tail) {
      ring->tail.store(new_tail, std::memory_order_release);
      *moved = true;
    }
    LOCKSTEP_RETURN_IF_ERROR(ReceiveSingleCopy(t, p, tag, moved));
  } else {
    const uint64_t available = head - new_tail;
    if (p.done < t.bytes && available > 0) {
      const uint64_t pos = new_tail % capacity_;
      const size_t n =
          std::min({t.bytes - p.done, static_cast<size_t>(available), static_cast<size_t>(capacity_ - pos), slot_});
      const char* src = ring->data() + pos;
      if (t.consume) {
        LOCKSTEP_RETURN_IF_ERROR(t.consume(p.done, src, n));
      } else {
        Copy(static_cast<char*>(t.data) + p.done, src, n, t.bytes >= tr_.options_.streaming_receive_bytes);
      }
      p.done += n;
      new_tail += n;
      tr_.traffic_.Received(t.peer, n);
    }
    if (p.done == t.bytes) new_tail = RoundUp(new_tail, kLine);
    if (new_tail != tail) {
      ring->tail.store(new_tail, std::memory_order_release);
      Notify(t.peer);
      *moved = true;
    }
  }
  return ReportSegments(t, p.done, &p.reported);
}

absl::Status ShmTransport::Op::ReceiveHeader(Transfer& t, Progress& p, const MessageTag& tag,
                                             const MessageHeader& header) {
  MessageHeader h = header;
  if (h.magic == kSingleCopyMagic) {
    if (tr_.peers_[t.peer].pid <= 0) {
      return absl::InternalError(absl::StrCat("ShmTransport: ", tr_.PeerName(t.peer), " sent op #", h.seq,
                                              " single-copy, but rank ", tr_.rank_,
                                              " does not know its pid; give every rank one lockstep build"));
    }
    p.single = true;
    p.base = h.base;
    p.address = h.address;
    h.magic = kMessageMagic;  // Checked as any message's below.
  }
  if (t.route && h.magic == kMessageMagic) {
    LOCKSTEP_ASSIGN_OR_RETURN(t.data, t.route(MessageTag{h.seq, h.tag, static_cast<uint8_t>(h.element)}, h.bytes));
    if (t.data != LeaveMessage()) t.bytes = h.bytes;
    return absl::OkStatus();
  }
  return CheckMessageHeader(
      h, tag, t.bytes, [&] { return tr_.PeerName(t.peer); }, tr_.rank_);
}

absl::Status ShmTransport::Op::ReceiveSingleCopy(Transfer& t, Progress& p, const MessageTag& tag, bool* moved) {
  Ring* ring = tr_.RingOf(t.peer, tr_.rank_);
  const size_t exposed =
      static_cast<size_t>(std::min<uint64_t>(ring->exposed.load(std::memory_order_acquire) - p.base, t.bytes));
  if (exposed <= p.done) return absl::OkStatus();
  const size_t n = std::min(exposed - p.done, t.consume ? kSingleCopyStage : kSingleCopyPiece);
  char* dst;
  if (t.consume) {
    if (tr_.staging_ == nullptr) tr_.staging_.reset(new char[kSingleCopyStage]);
    dst = tr_.staging_.get();
  } else {
    dst = static_cast<char*>(t.data) + p.done;
  }
  if (const int err = ReadRemote(tr_.peers_[t.peer].pid, p.address + p.done, dst, n); err != 0) {
    if (err == ESRCH || PeerHungUp(t.peer)) return tr_.PeerGoneError(t.peer, tag.seq);
    return absl::InternalError(absl::StrCat("ShmTransport: rank ", tr_.rank_, " could not read bytes [", p.done, ", ",
                                            p.done + n, ") of op #", tag.seq, " ", DescribeTag(tag.tag), " (", t.bytes,
                                            " bytes) from the memory of ", tr_.PeerName(t.peer),
                                            " with process_vm_readv: ", std::strerror(err),
                                            ". The sender's buffer must stay valid until its send completes; set "
                                            "ShmTransportOptions.single_copy_bytes = 0 to use the ring only"));
  }
  // A pid is reused only after its process died, which hangs up its socket:
  // with the socket still open at the end, every piece came from the peer.
  if (p.done + n == t.bytes && PeerHungUp(t.peer)) return tr_.PeerGoneError(t.peer, tag.seq);
  if (t.consume) LOCKSTEP_RETURN_IF_ERROR(t.consume(p.done, dst, n));
  p.done += n;
  tr_.traffic_.Received(t.peer, n);
  tr_.single_copy_received_.fetch_add(n, std::memory_order_relaxed);
  ring->acked.store(p.base + p.done, std::memory_order_release);
  Notify(t.peer);
  *moved = true;
  return absl::OkStatus();
}

bool ShmTransport::Op::CouldMove(size_t stream) {
  const Transfer& t = streams_.at(streams_.current[stream]);
  const Progress& p = streams_.progress[streams_.current[stream]];
  const bool send = t.kind == Transfer::Kind::kSend;
  const Ring* ring = send ? tr_.RingOf(tr_.rank_, t.peer) : tr_.RingOf(t.peer, tr_.rank_);
  if (p.single) {
    if (!send) return ring->exposed.load(std::memory_order_acquire) - p.base > p.done;
    return SendableBytes(t) > p.exposed || ring->acked.load(std::memory_order_acquire) - p.base > p.done;
  }
  if (send) {
    const uint64_t used = ring->head.load(std::memory_order_relaxed) - ring->tail.load(std::memory_order_acquire);
    if (!p.header_done) return capacity_ - used >= kLine;
    return p.done < SendableBytes(t) && used < capacity_;
  }
  return ring->head.load(std::memory_order_acquire) != ring->tail.load(std::memory_order_relaxed);
}

}  // namespace lockstep
