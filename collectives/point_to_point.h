// PointToPointEngine: runs the communicator's Send/Recv operations over a
// Transport's open exchange (Transport::ExchangeOpen), as c10d's isend/irecv
// and recvAnysource.
//
//   * Sends and receives with any peers run concurrently, and operations
//     posted while a batch runs join it, so two ranks may each Send and then
//     Recv any amount without deadlock.
//   * Matching follows MPI's rule: a message goes to the earliest posted
//     receive that accepts it (same tag; its sender, or any rank), and
//     messages from one peer with one tag are received in the order they
//     were sent. So the k-th Recv from peer P with tag T gets the k-th Send
//     from P to this rank with tag T, whatever the order of other tags, as
//     long as no receive from any rank takes one of them first.
//   * A message that arrives before a receive accepts it is kept (up to
//     `unexpected_bytes_limit` in all) and handed over when one is posted;
//     one that does not fit is an error naming the peer, the tag and the
//     limit, never a hang.
//   * A Recv whose size differs from the matching Send's fails naming both.
//   * A receive from any rank listens to every peer; a peer that has moved
//     on to the next collective (its next message is not point to point)
//     keeps that message for the collective and is not listened to again in
//     this batch.
//
// One engine per backend; kept messages survive from batch to batch. Used
// by one thread at a time (the one running the communicator's operations).
#ifndef LOCKSTEP_COLLECTIVES_POINT_TO_POINT_H_
#define LOCKSTEP_COLLECTIVES_POINT_TO_POINT_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "collectives/backend.h"
#include "collectives/transport/transport.h"

namespace lockstep {

class PointToPointEngine {
 public:
  PointToPointEngine(Transport& transport, size_t unexpected_bytes_limit)
      : transport_(transport),
        unexpected_limit_(unexpected_bytes_limit),
        router_active_(static_cast<size_t>(transport.size()), false),
        moved_on_(static_cast<size_t>(transport.size()), false),
        specific_posted_(static_cast<size_t>(transport.size()), 0) {}

  // Runs the batch `source` gives (see Backend::RunPointToPoint).
  absl::Status Run(PointToPointSource& source, Deadline deadline);

  // Bytes of messages kept for receives not yet posted.
  size_t unexpected_bytes() const { return unexpected_bytes_; }

 private:
  class Feed;
  struct PostedRecv {
    PointToPointOp op;  // op.peer: the sender, or kAnySource.
    Tensor host;        // op.tensor, or its pinned copy for a CUDA tensor.
  };
  struct Kept {
    int peer;
    uint64_t seq;
    uint8_t element = 0;
    std::vector<char> bytes;
  };

  // Takes the source's new operations, turning them into transfers.
  absl::Status Take(PointToPointSource& source, std::vector<Transfer>* more);
  // Posts a receive, or completes it at once from a kept message.
  absl::Status Post(std::unique_ptr<PostedRecv> recv);
  // A message kept under `tag` just arrived whole: a receive posted while
  // it was arriving gets it now.
  absl::Status MatchKept(uint32_t tag);
  // A receive of whatever `peer` sends next, routed by its tag.
  Transfer Router(int peer);
  // Whether a receive is posted that a message from `peer` could satisfy.
  bool Listening(int peer) const { return specific_posted_[peer] > 0 || any_source_posted_ > 0; }
  // Removes posted receive `it` of tag `tag`, keeping the counts.
  std::unique_ptr<PostedRecv> Unpost(uint32_t tag, std::deque<std::unique_ptr<PostedRecv>>::iterator it);
  static absl::Status Finish(PostedRecv& recv, int peer);

  Transport& transport_;
  const size_t unexpected_limit_;
  std::map<uint32_t, std::deque<std::unique_ptr<PostedRecv>>> posted_;  // By user tag, in post order.
  std::map<uint32_t, std::deque<Kept>> kept_;                           // By user tag, in arrival order.
  // The seq of the next message expected from (peer, tag): messages of one
  // stream arrive in send order.
  std::map<std::pair<int, uint32_t>, uint64_t> next_seq_;
  size_t unexpected_bytes_ = 0;
  std::vector<bool> router_active_;      // Per peer.
  std::vector<bool> moved_on_;           // Per peer, this batch: its next message is a collective's.
  std::vector<size_t> specific_posted_;  // Per peer: posted receives from it.
  size_t any_source_posted_ = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_POINT_TO_POINT_H_
