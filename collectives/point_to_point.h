// PointToPointEngine: runs the communicator's Send/Recv operations over a
// Transport's open exchange (Transport::ExchangeOpen), as c10d's isend/irecv.
//
//   * Sends and receives with any peers run concurrently, and operations
//     posted while a batch runs join it, so two ranks may each Send and then
//     Recv any amount without deadlock.
//   * Matching is per (peer, tag), in call order: the k-th Recv from peer P
//     with tag T gets the k-th Send from P to this rank with tag T, whatever
//     the order of other tags. A message that arrives before its Recv is
//     posted is kept (up to `unexpected_bytes_limit` in all) and handed over
//     when the Recv comes; one that does not fit is an error naming the
//     peer, the tag and the limit, never a hang.
//   * A Recv whose size differs from the matching Send's fails naming both.
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
      : transport_(transport), unexpected_limit_(unexpected_bytes_limit),
        router_active_(static_cast<size_t>(transport.size()), false) {}

  // Runs the batch `source` gives (see Backend::RunPointToPoint).
  absl::Status Run(PointToPointSource& source, Deadline deadline);

  // Bytes of messages kept for receives not yet posted.
  size_t unexpected_bytes() const { return unexpected_bytes_; }

 private:
  class Feed;
  struct PostedRecv {
    PointToPointOp op;
    Tensor host;  // op.tensor, or its pinned copy for a CUDA tensor.
  };
  struct Kept {
    uint64_t seq;
    uint8_t element = 0;
    std::vector<char> bytes;
  };
  using Key = std::pair<int, uint32_t>;  // (peer, user tag)

  // Takes the source's new operations, turning them into transfers.
  absl::Status Take(PointToPointSource& source, std::vector<Transfer>* more);
  // A receive of whatever `peer` sends next, routed by its tag.
  Transfer Router(int peer);
  static absl::Status Finish(PostedRecv& recv);

  Transport& transport_;
  const size_t unexpected_limit_;
  std::map<Key, std::deque<std::unique_ptr<PostedRecv>>> posted_;  // In seq order.
  std::map<Key, std::deque<Kept>> kept_;
  size_t unexpected_bytes_ = 0;
  std::vector<bool> router_active_;  // Per peer.
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_POINT_TO_POINT_H_
