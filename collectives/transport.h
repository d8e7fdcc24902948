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
#ifndef LOCKSTEP_COLLECTIVES_TRANSPORT_H_
#define LOCKSTEP_COLLECTIVES_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collectives/socket.h"

namespace lockstep {

// Identifies a message: the operation's sequence number and a tag for the
// step within it.
struct MessageTag {
  uint64_t seq = 0;
  uint32_t tag = 0;
};

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
  // Sends only: how many bytes (from the start) may be sent so far; null
  // means all. It grows as the caller's receive callbacks produce data.
  std::function<size_t()> ready;
  // The tag of this message; -1: the Exchange's tag.
  int64_t tag = -1;

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

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // "rank 2 (10.0.0.3:41234)", for error messages.
  virtual std::string PeerName(int peer) const = 0;

  // Runs all transfers concurrently; every message is tagged with `tag`.
  virtual absl::Status Exchange(absl::Span<Transfer> transfers, MessageTag tag, Deadline deadline) = 0;

  // Tells every peer why (best effort) and closes every connection, so that
  // peers blocked on this rank fail at once, with `reason` in their error,
  // instead of waiting for their timeout. The transport is unusable after.
  virtual void Abort(absl::string_view reason) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_TRANSPORT_H_
