// TransferStreams: the transfers of one Transport::Exchange or ExchangeOpen,
// queued per stream in call order. Internal to the transports
// (collectives/transport/tcp/tcp_transport.cc, collectives/transport/shm/shm_transport.cc), which share
// the bookkeeping and differ only in how bytes move.
//
// A stream is (peer, direction): stream 2 * peer for sends, 2 * peer + 1 for
// receives. Transfers of one stream run one after another, linked through
// `next`; `current[stream]` is the one in progress (kNone: idle). Transfers
// the feed adds live in `added` (stable addresses; an empty vector allocates
// nothing, so collectives pay nothing for it). Inlined storage: no heap
// allocation per call for the usual few transfers. `Progress` is the
// transport's per-transfer state.
#ifndef LOCKSTEP_COLLECTIVES_TRANSPORT_TRANSFER_STREAMS_H_
#define LOCKSTEP_COLLECTIVES_TRANSPORT_TRANSFER_STREAMS_H_

#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "collectives/transport/transport.h"
#include "core/status.h"

namespace lockstep {

// The tag of `t`'s message: its own seq, tag and element where set, else
// those of the exchange (`exchange`).
inline MessageTag TransferTag(const Transfer& t, const MessageTag& exchange) {
  return MessageTag{t.seq >= 0 ? static_cast<uint64_t>(t.seq) : exchange.seq,
                    t.tag >= 0 ? static_cast<uint32_t>(t.tag) : exchange.tag,
                    t.element != 0 ? t.element : exchange.element};
}

// How much of a send may go out now: all of it, or what its `ready` says.
inline size_t SendableBytes(const Transfer& t) { return t.ready ? std::min(t.ready(), t.bytes) : t.bytes; }

// A receive's on_segment for every whole segment of its first `done` bytes
// not reported yet; `*reported` counts what was.
inline absl::Status ReportSegments(Transfer& t, size_t done, size_t* reported) {
  if (!t.on_segment) return absl::OkStatus();
  const size_t seg = t.segment_bytes == 0 ? std::max<size_t>(t.bytes, 1) : t.segment_bytes;
  while (*reported < t.bytes) {
    const size_t len = std::min(seg, t.bytes - *reported);
    if (done - *reported < len) break;
    LOCKSTEP_RETURN_IF_ERROR(t.on_segment(*reported, len));
    *reported += len;
  }
  return absl::OkStatus();
}

template <typename Progress>
class TransferStreams {
 public:
  static constexpr size_t kNone = ~size_t{0};

  // `transport` names the caller in errors ("TcpTransport").
  TransferStreams(absl::Span<Transfer> initial, int rank, int size, absl::string_view transport)
      : current(2 * static_cast<size_t>(size), kNone),
        last(2 * static_cast<size_t>(size), kNone),
        initial_(initial),
        rank_(rank),
        size_(size),
        transport_(transport) {}

  Transfer& at(size_t i) { return i < initial_.size() ? initial_[i] : *added_[i - initial_.size()]; }

  // Queues the initial transfers, then the feed's first ones.
  absl::Status Start(TransferFeed* feed) {
    for (size_t i = 0; i < initial_.size(); ++i) LOCKSTEP_RETURN_IF_ERROR(Link(i));
    return PollFeed(feed);
  }

  // Queues what the feed has now (nothing without a feed).
  absl::Status PollFeed(TransferFeed* feed) {
    if (feed == nullptr) return absl::OkStatus();
    more_.clear();
    feed->Poll(&more_);
    for (Transfer& t : more_) {
      added_.push_back(std::make_unique<Transfer>(std::move(t)));
      LOCKSTEP_RETURN_IF_ERROR(Link(initial_.size() + added_.size() - 1));
    }
    return absl::OkStatus();
  }

  // What is still in flight, for a timeout error: "receiving from rank 1
  // (...) (10 of 64 bytes)". `peer_name(peer)` names a peer; Progress has
  // `done`, the bytes moved so far.
  template <typename PeerNameFn>
  std::vector<std::string> InFlight(const PeerNameFn& peer_name) {
    std::vector<std::string> waiting;
    for (size_t stream = 0; stream < current.size(); ++stream) {
      if (current[stream] == kNone) continue;
      const size_t i = current[stream];
      const Transfer& t = at(i);
      waiting.push_back(absl::StrCat(t.kind == Transfer::Kind::kSend ? "sending to " : "receiving from ",
                                     peer_name(t.peer), " (", progress[i].done, " of ", t.bytes, " bytes)"));
    }
    return waiting;
  }

  // True when every transfer still in flight is a routed receive that may
  // be dropped now (Transfer::droppable) and has not `started(progress)`:
  // an open exchange may then end.
  template <typename StartedFn>
  bool OnlyDroppableLeft(const StartedFn& started) {
    if (droppables_ == 0) return false;
    for (size_t stream = 0; stream < current.size(); ++stream) {
      for (size_t i = current[stream]; i != kNone; i = next[i]) {
        const Transfer& t = at(i);
        if (!t.droppable || started(progress[i]) || !t.droppable()) return false;
      }
    }
    return true;
  }

  absl::InlinedVector<size_t, 16> current;     // [stream]: the transfer in progress, or kNone.
  absl::InlinedVector<size_t, 16> last;        // [stream]: the last transfer queued, or kNone.
  absl::InlinedVector<size_t, 16> next;        // [transfer]: the next one of its stream, or kNone.
  absl::InlinedVector<Progress, 16> progress;  // [transfer]
  size_t total = 0, remaining = 0;

 private:
  absl::Status Link(size_t i) {
    const Transfer& t = at(i);
    if (t.peer < 0 || t.peer >= size_ || t.peer == rank_) {
      return absl::InvalidArgumentError(absl::StrCat(transport_, ": bad peer ", t.peer, " for rank ", rank_));
    }
    next.push_back(kNone);
    progress.emplace_back();
    const size_t stream = 2 * t.peer + (t.kind == Transfer::Kind::kRecv ? 1 : 0);
    if (current[stream] == kNone) {
      current[stream] = i;  // Idle stream (nothing yet, or all before completed).
    } else {
      next[last[stream]] = i;
    }
    last[stream] = i;
    ++total;
    ++remaining;
    if (t.droppable) ++droppables_;
    return absl::OkStatus();
  }

  absl::Span<Transfer> initial_;
  const int rank_, size_;
  const absl::string_view transport_;
  std::vector<std::unique_ptr<Transfer>> added_;
  std::vector<Transfer> more_;
  size_t droppables_ = 0;  // Transfers with `droppable` ever linked (0: skip the scan).
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_TRANSPORT_TRANSFER_STREAMS_H_
