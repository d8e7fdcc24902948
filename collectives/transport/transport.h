// Transport: moves bytes between the ranks of a group, hidden behind a small
// interface so that algorithms never see sockets (a shared-memory transport
// can implement the same calls).
//
// One call, `Exchange`, runs a set of transfers until all complete or one
// fails or the deadline passes. Transfers with different peers or directions
// run concurrently; several to the same peer in the same direction share one
// byte stream and run one after another, in the order given. A send can be
// gated by `ready`, so that a pipelined algorithm streams data onward as it
// is produced by its own receives. Every message
// carries a header (sequence number, tag, byte count) that the receiver
// checks against what it expects, so bytes of two operations can never mix:
// a mismatch is an error naming both views.
//
// `ExchangeOpen` is the same engine left open for point-to-point
// operations: a feed adds transfers while earlier ones are in flight, so a
// send and a receive posted one after the other both progress (two ranks
// sending each other more than a socket buffer holds cannot deadlock).
//
// Implementations: TcpTransport (collectives/transport/tcp/tcp_transport.h),
// ShmTransport (collectives/transport/shm/shm_transport.h) and, for tests, FakeTransport
// (collectives/testing/fake_transport.h); all pass the conformance suite in
// collectives/testing/transport_conformance.h.
#ifndef LOCKSTEP_COLLECTIVES_TRANSPORT_TRANSPORT_H_
#define LOCKSTEP_COLLECTIVES_TRANSPORT_TRANSPORT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/deadline.h"

namespace lockstep {

// Identifies a message: the operation's sequence number and a tag for the
// step within it.
struct MessageTag {
  uint64_t seq = 0;
  uint32_t tag = 0;
  // The payload's element type, as 1 + DType code; 0: untyped bytes. When
  // both sides give one they must agree, so a same-size mismatch (f32 vs
  // i32) is caught without the debug fingerprints.
  uint8_t element = 0;
};

// "f32", or "untyped", for error messages.
std::string ElementName(uint8_t element);

// Tags with this bit set carry point-to-point messages (the user's tag in the
// low 31 bits); collectives number their steps from 0.
constexpr uint32_t kPointToPointTagBit = 0x80000000u;

// "tag 3", or "point-to-point tag 5", for error messages.
inline std::string DescribeTag(uint32_t tag) {
  if ((tag & kPointToPointTagBit) != 0 && tag < 0xFFFFFF00u) {
    return "point-to-point tag " + std::to_string(tag & ~kPointToPointTagBit);
  }
  return "tag " + std::to_string(tag);
}

struct Transfer {
  enum class Kind { kSend, kRecv };
  Kind kind = Kind::kSend;
  int peer = -1;
  void* data = nullptr;  // Source for sends, destination for receives.
  size_t bytes = 0;
  // Receives only: `on_segment(offset, length)` is called, in order, each
  // time another `segment_bytes` (or the final remainder) has arrived, so
  // the caller can reduce one segment while the next is still in flight.
  size_t segment_bytes = 0;
  std::function<absl::Status(size_t offset, size_t length)> on_segment;
  // Receives only, optional, and only for a transport whose
  // ConsumesInPlace() is true: the payload is handed over where it lies
  // (in shared memory's ring, or TCP's cache-sized receive buffer) instead
  // of being copied into `data`, in consecutive
  // pieces, `consume(offset, bytes, length)`, before the on_segment call
  // that covers them; `data` may then be null. A reduction can so read
  // straight out of the transport's buffers, saving a copy.
  std::function<absl::Status(size_t offset, const void* bytes, size_t length)> consume;
  // Sends only: how many bytes (from the start) may be sent so far; null
  // means all. It grows as the caller's receive callbacks produce data.
  std::function<size_t()> ready;
  // The tag, sequence number and element type of this message; -1 (0 for
  // the element): the Exchange's.
  int64_t tag = -1;
  int64_t seq = -1;
  uint8_t element = 0;
  // Receives in ExchangeOpen only: accept the next message from `peer`
  // whatever its seq and tag; when its header has arrived, `route(tag,
  // bytes)` returns where its `bytes` bytes go (this transfer's data and
  // bytes are then set), or an error that fails the exchange, or
  // LeaveMessage(): the message is not this transfer's (a peer that moved
  // on to the next collective), so it stays where it is, header and all,
  // for the next receive from `peer`, and this transfer completes empty.
  std::function<absl::StatusOr<void*>(const MessageTag& tag, size_t bytes)> route;
  // Routed receives only, optional: while this returns true and no byte of
  // a message has arrived for the transfer, the exchange may end without
  // it (it is dropped, on_done never called). A receive that turned out
  // not to be needed (one of several that could satisfy a receive from any
  // rank) so does not hold the exchange open.
  std::function<bool()> droppable;
  // Called once, when this transfer has completed (a receive: all bytes
  // arrived and were checked); an error fails the exchange.
  std::function<absl::Status()> on_done;

  static Transfer Send(int peer, const void* data, size_t bytes) {
    Transfer t;
    t.kind = Kind::kSend;
    t.peer = peer;
    t.data = const_cast<void*>(data);
    t.bytes = bytes;
    return t;
  }
  static Transfer Recv(int peer, void* data, size_t bytes) {
    Transfer t;
    t.kind = Kind::kRecv;
    t.peer = peer;
    t.data = data;
    t.bytes = bytes;
    return t;
  }
};

// What a Transfer::route returns to leave a message in place (see there):
// a unique address that is never a buffer.
inline void* LeaveMessage() {
  static char marker;
  return &marker;
}

// Where ExchangeOpen gets more transfers.
class TransferFeed {
 public:
  virtual ~TransferFeed() = default;
  // Appends the transfers that became available since the last call
  // (each with its own seq and tag). Called between rounds of I/O.
  virtual void Poll(std::vector<Transfer>* more) = 0;
  // An eventfd-like descriptor that turns readable when Poll has more, so
  // an idle transport wakes up; the transport never reads it. -1: none
  // (then the transport re-polls the feed at least every millisecond).
  virtual int wake_fd() const { return -1; }
};

// Payload bytes moved per peer since the transport was created (message
// headers not counted).
struct TrafficCounters {
  std::vector<uint64_t> bytes_sent;      // [peer]
  std::vector<uint64_t> bytes_received;  // [peer]
};

// What a transport counts for Traffic(): bumped by its exchanging thread
// (one at a time), read from any thread. A bump is a load and a store, not
// a read-modify-write: on x86 that is a locked instruction, which waits
// for every store before it (a message just copied into a peer's ring)
// to reach the cache, on the sender's critical path.
class TrafficTally {
 public:
  explicit TrafficTally(int size)
      : size_(size), sent_(new std::atomic<uint64_t>[size]()), received_(new std::atomic<uint64_t>[size]()) {}
  void Sent(int peer, uint64_t bytes) { Bump(sent_[peer], bytes); }
  void Received(int peer, uint64_t bytes) { Bump(received_[peer], bytes); }
  TrafficCounters Snapshot() const;

 private:
  static void Bump(std::atomic<uint64_t>& counter, uint64_t bytes) {
    counter.store(counter.load(std::memory_order_relaxed) + bytes, std::memory_order_relaxed);
  }

  int size_;
  std::unique_ptr<std::atomic<uint64_t>[]> sent_, received_;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // "rank 2 (10.0.0.3:41234)", for error messages.
  virtual std::string PeerName(int peer) const = 0;

  // Runs all transfers concurrently; every message is tagged with `tag`.
  virtual absl::Status Exchange(absl::Span<Transfer> transfers, MessageTag tag, Deadline deadline) = 0;

  // Runs the feed's transfers (Poll is called first, then between rounds)
  // until every one completed (or may be dropped: Transfer::droppable) and
  // the feed has no more, or one fails, or the deadline passes. Transfers
  // must carry their own seq and tag.
  virtual absl::Status ExchangeOpen(TransferFeed& feed, Deadline deadline) = 0;

  virtual TrafficCounters Traffic() const = 0;

  // Whether receives honour Transfer::consume (false: set it never).
  virtual bool ConsumesInPlace() const { return false; }

  // Tells every peer why (best effort) and closes every connection, so that
  // peers blocked on this rank fail at once, with `reason` in their error,
  // instead of waiting for their timeout. The transport is unusable after.
  virtual void Abort(absl::string_view reason) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_TRANSPORT_TRANSPORT_H_
