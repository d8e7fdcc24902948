#include "collectives/point_to_point.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace lockstep {

namespace {

uint8_t ElementOf(const Tensor& t) { return static_cast<uint8_t>(static_cast<int>(t.dtype()) + 1); }

std::string DescribeRecv(const PointToPointOp& recv) {
  if (recv.peer == PointToPointOp::kAnySource) return absl::StrCat("RecvAnySource (tag ", recv.tag, ")");
  return absl::StrCat("Recv #", recv.seq, " from rank ", recv.peer, " (tag ", recv.tag, ")");
}

// Checks a message of `bytes` bytes of `element` from `peer` against the
// receive that accepts it.
absl::Status CheckMatch(const PointToPointOp& recv, size_t expected_bytes, int peer, const std::string& name,
                        uint8_t element, size_t bytes) {
  if (element != 0 && element != ElementOf(recv.tensor)) {
    return absl::InvalidArgumentError(absl::StrCat(DescribeRecv(recv), " expects ", ElementName(ElementOf(recv.tensor)),
                                                   " elements, but the matching Send from ", name, " carries ",
                                                   ElementName(element)));
  }
  if (bytes != expected_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(DescribeRecv(recv), " expects ", expected_bytes,
                                                   " bytes, but the matching Send from ", name, " carries ", bytes,
                                                   "; post receives of the size the peer sends"));
  }
  return absl::OkStatus();
}

}  // namespace

// Adapts the engine to the transport's feed; remembers the first error.
class PointToPointEngine::Feed : public TransferFeed {
 public:
  Feed(PointToPointEngine& engine, PointToPointSource& source) : engine_(engine), source_(source) {}
  void Poll(std::vector<Transfer>* more) override {
    if (!error_.ok()) return;
    error_ = engine_.Take(source_, more);
  }
  int wake_fd() const override { return source_.wake_fd(); }
  const absl::Status& error() const { return error_; }

 private:
  PointToPointEngine& engine_;
  PointToPointSource& source_;
  absl::Status error_;
};

absl::Status PointToPointEngine::Run(PointToPointSource& source, Deadline deadline) {
  std::fill(moved_on_.begin(), moved_on_.end(), false);
  Feed feed(*this, source);
  absl::Status status = transport_.ExchangeOpen(feed, deadline);
  // Every router has completed or was dropped with the exchange.
  std::fill(router_active_.begin(), router_active_.end(), false);
  // A feed error (bad staging) explains a transport error that follows it.
  if (!feed.error().ok()) status = feed.error();
  if (status.ok() && !posted_.empty()) {
    // Only receives from any rank can be left: every peer they listened to
    // moved on to the next collective.
    const PointToPointOp& first = posted_.begin()->second.front()->op;
    status = absl::FailedPreconditionError(absl::StrCat(
        "collective mismatch: rank ", transport_.rank(), " waits in ", DescribeRecv(first),
        " but every other rank has gone on to its next collective without sending a message with that tag. "
        "Post the matching Send on some rank before its next collective"));
  }
  if (!status.ok()) {
    // Receives still posted will never complete in this batch: the
    // communicator fails them; forget them here.
    posted_.clear();
    std::fill(specific_posted_.begin(), specific_posted_.end(), 0);
    any_source_posted_ = 0;
  }
  return status;
}

absl::Status PointToPointEngine::Finish(PostedRecv& recv, int peer) {
  if (recv.host.raw_data() != recv.op.tensor.raw_data()) LOCKSTEP_RETURN_IF_ERROR(recv.op.tensor.CopyFrom(recv.host));
  if (recv.op.done) recv.op.done(peer);
  return absl::OkStatus();
}

std::unique_ptr<PointToPointEngine::PostedRecv> PointToPointEngine::Unpost(
    uint32_t tag, std::deque<std::unique_ptr<PostedRecv>>::iterator it) {
  std::unique_ptr<PostedRecv> recv = std::move(*it);
  auto queue = posted_.find(tag);
  queue->second.erase(it);
  if (queue->second.empty()) posted_.erase(queue);
  if (recv->op.peer == PointToPointOp::kAnySource) {
    --any_source_posted_;
  } else {
    --specific_posted_[recv->op.peer];
  }
  return recv;
}

absl::Status PointToPointEngine::Post(std::unique_ptr<PostedRecv> recv) {
  const uint32_t tag = recv->op.tag;
  const int wanted = recv->op.peer;
  // A kept message it accepts: the earliest from its peer (or from anyone).
  auto kept = kept_.find(tag);
  if (kept != kept_.end()) {
    std::deque<Kept>& messages = kept->second;
    auto it = std::find_if(messages.begin(), messages.end(), [wanted](const Kept& k) {
      return wanted == PointToPointOp::kAnySource || k.peer == wanted;
    });
    if (it != messages.end()) {
      LOCKSTEP_RETURN_IF_ERROR(CheckMatch(recv->op, recv->host.nbytes(), it->peer, transport_.PeerName(it->peer),
                                          it->element, it->bytes.size()));
      if (!it->bytes.empty()) std::memcpy(recv->host.raw_data(), it->bytes.data(), it->bytes.size());
      unexpected_bytes_ -= it->bytes.size();
      const int peer = it->peer;
      messages.erase(it);
      if (messages.empty()) kept_.erase(kept);
      return Finish(*recv, peer);
    }
  }
  if (wanted == PointToPointOp::kAnySource) {
    ++any_source_posted_;
  } else {
    ++specific_posted_[wanted];
  }
  posted_[tag].push_back(std::move(recv));
  return absl::OkStatus();
}

absl::Status PointToPointEngine::Take(PointToPointSource& source, std::vector<Transfer>* more) {
  std::vector<PointToPointOp> ops;
  source.Take(&ops);
  for (PointToPointOp& op : ops) {
    // CUDA tensors travel through their own pinned host copy.
    Tensor host = op.tensor;
    if (!host.device().is_cpu()) {
      LOCKSTEP_ASSIGN_OR_RETURN(host, Tensor::Empty({op.tensor.numel()}, op.tensor.dtype(), Device::Cpu(),
                                                    /*pinned=*/true));
      if (op.send) LOCKSTEP_RETURN_IF_ERROR(host.CopyFrom(op.tensor));
    }
    if (op.send) {
      Transfer t = Transfer::Send(op.peer, host.raw_data(), host.nbytes());
      t.seq = static_cast<int64_t>(op.seq);
      t.tag = op.tag | kPointToPointTagBit;
      t.element = ElementOf(op.tensor);
      auto done = std::move(op.done);
      t.on_done = [done, host, peer = op.peer]() {  // `host` keeps a staged copy alive.
        if (done) done(peer);
        return absl::OkStatus();
      };
      more->push_back(std::move(t));
      continue;
    }
    LOCKSTEP_RETURN_IF_ERROR(Post(std::make_unique<PostedRecv>(PostedRecv{std::move(op), host})));
  }
  // Every peer a posted receive listens to gets a router, one at a time.
  for (int peer = 0; peer < transport_.size(); ++peer) {
    if (peer == transport_.rank() || router_active_[peer] || moved_on_[peer] || !Listening(peer)) continue;
    router_active_[peer] = true;
    more->push_back(Router(peer));
  }
  return absl::OkStatus();
}

Transfer PointToPointEngine::Router(int peer) {
  // What the routed message turned out to be, for on_done.
  struct Routed {
    std::unique_ptr<PostedRecv> recv;  // A posted receive it matched...
    uint32_t tag = 0;                  // ...or the tag it is kept under,
    Kept kept{};                       // with its bytes.
    bool left = false;                 // ...or a collective's, left in place.
  };
  auto routed = std::make_shared<Routed>();
  Transfer t = Transfer::Recv(peer, nullptr, 0);
  t.route = [this, peer, routed](const MessageTag& tag, size_t bytes) -> absl::StatusOr<void*> {
    if ((tag.tag & kPointToPointTagBit) == 0 || tag.tag >= 0xFFFFFF00u) {
      if (specific_posted_[peer] == 0) {
        // Listened to only for a receive from any rank: the peer has moved
        // on; its collective message waits for the collective.
        moved_on_[peer] = true;
        routed->left = true;
        return LeaveMessage();
      }
      return absl::InternalError(
          absl::StrCat("collective mismatch: rank ", transport_.rank(), " waits for a point-to-point message from ",
                       transport_.PeerName(peer), ", which sent op #", tag.seq, " ", DescribeTag(tag.tag),
                       " instead. Both ranks must post the same collectives and sends/receives between them"));
    }
    const uint32_t user_tag = tag.tag & ~kPointToPointTagBit;
    uint64_t& expected = next_seq_[{peer, user_tag}];
    if (tag.seq != expected) {
      return absl::InternalError(absl::StrCat("rank ", transport_.rank(), " got send #", tag.seq, " with tag ",
                                              user_tag, " from ", transport_.PeerName(peer), " but expected its send #",
                                              expected, ": messages were lost or duplicated"));
    }
    ++expected;
    auto posted = posted_.find(user_tag);
    if (posted != posted_.end()) {
      auto& queue = posted->second;
      auto it = std::find_if(queue.begin(), queue.end(), [peer](const std::unique_ptr<PostedRecv>& r) {
        return r->op.peer == peer || r->op.peer == PointToPointOp::kAnySource;
      });
      if (it != queue.end()) {
        LOCKSTEP_RETURN_IF_ERROR(
            CheckMatch((*it)->op, (*it)->host.nbytes(), peer, transport_.PeerName(peer), tag.element, bytes));
        routed->recv = Unpost(user_tag, it);
        return routed->recv->host.raw_data();
      }
    }
    // No receive for it yet: keep it, within the limit.
    if (unexpected_bytes_ + bytes > unexpected_limit_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("rank ", transport_.rank(), " got a message from ", transport_.PeerName(peer), " with tag ",
                       user_tag, " (", bytes, " bytes, its send #", tag.seq, ") before posting a Recv for it, and ",
                       unexpected_bytes_, " bytes of such messages are already kept; the limit is ", unexpected_limit_,
                       " (AlgorithmOptions::unexpected_bytes_limit). Post that Recv earlier, or raise the limit"));
    }
    unexpected_bytes_ += bytes;
    routed->tag = user_tag;
    routed->kept.peer = peer;
    routed->kept.seq = tag.seq;
    routed->kept.element = tag.element;
    routed->kept.bytes.resize(bytes);
    return static_cast<void*>(routed->kept.bytes.data());
  };
  // Not needed any more (a receive from any rank took another's message):
  // the batch need not wait for this peer.
  t.droppable = [this, peer] { return !Listening(peer); };
  t.on_done = [this, peer, routed]() -> absl::Status {
    router_active_[peer] = false;  // The feed's next Poll adds another if needed.
    if (routed->left) return absl::OkStatus();
    if (routed->recv != nullptr) return Finish(*routed->recv, peer);
    kept_[routed->tag].push_back(std::move(routed->kept));
    return MatchKept(routed->tag);
  };
  return t;
}

absl::Status PointToPointEngine::MatchKept(uint32_t tag) {
  auto posted = posted_.find(tag);
  if (posted == posted_.end()) return absl::OkStatus();
  std::deque<Kept>& messages = kept_[tag];
  const Kept& message = messages.back();
  auto& queue = posted->second;
  auto it = std::find_if(queue.begin(), queue.end(), [&message](const std::unique_ptr<PostedRecv>& r) {
    return r->op.peer == message.peer || r->op.peer == PointToPointOp::kAnySource;
  });
  if (it == queue.end()) return absl::OkStatus();
  std::unique_ptr<PostedRecv> recv = Unpost(tag, it);
  LOCKSTEP_RETURN_IF_ERROR(CheckMatch(recv->op, recv->host.nbytes(), message.peer, transport_.PeerName(message.peer),
                                      message.element, message.bytes.size()));
  if (!message.bytes.empty()) std::memcpy(recv->host.raw_data(), message.bytes.data(), message.bytes.size());
  unexpected_bytes_ -= message.bytes.size();
  const int peer = message.peer;
  messages.pop_back();
  if (messages.empty()) kept_.erase(tag);
  return Finish(*recv, peer);
}

}  // namespace lockstep
