#include "collectives/point_to_point.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace lockstep {

namespace {

uint8_t ElementOf(const Tensor& t) { return static_cast<uint8_t>(static_cast<int>(t.dtype()) + 1); }

absl::Status TypeMismatch(const PointToPointOp& recv, uint8_t sent) {
  return absl::InvalidArgumentError(absl::StrCat("Recv #", recv.seq, " from rank ", recv.peer, " (tag ", recv.tag,
                                                 ") expects ", ElementName(ElementOf(recv.tensor)),
                                                 " elements, but the matching Send carries ", ElementName(sent)));
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
  Feed feed(*this, source);
  absl::Status status = transport_.ExchangeOpen(feed, deadline);
  // A feed error (bad staging) explains a transport error that follows it.
  if (!feed.error().ok()) return feed.error();
  if (!status.ok()) {
    // Receives still posted will never complete in this batch: the
    // communicator fails them; forget them here.
    posted_.clear();
    std::fill(router_active_.begin(), router_active_.end(), false);
  }
  return status;
}

absl::Status PointToPointEngine::Finish(PostedRecv& recv) {
  if (recv.host.raw_data() != recv.op.tensor.raw_data()) LOCKSTEP_RETURN_IF_ERROR(recv.op.tensor.CopyFrom(recv.host));
  if (recv.op.done) recv.op.done();
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
      t.on_done = [done, host]() {  // `host` keeps a staged copy alive.
        if (done) done();
        return absl::OkStatus();
      };
      more->push_back(std::move(t));
      continue;
    }
    auto recv = std::make_unique<PostedRecv>(PostedRecv{std::move(op), host});
    const Key key{recv->op.peer, recv->op.tag};
    auto kept = kept_.find(key);
    if (kept != kept_.end() && !kept->second.empty() && kept->second.front().seq == recv->op.seq) {
      // Its message came first: hand it over now.
      Kept& message = kept->second.front();
      if (message.element != 0 && message.element != ElementOf(recv->op.tensor)) {
        return TypeMismatch(recv->op, message.element);
      }
      if (message.bytes.size() != recv->host.nbytes()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Recv #", recv->op.seq, " from rank ", recv->op.peer, " (tag ", recv->op.tag, ") expects ",
            recv->host.nbytes(), " bytes, but the matching Send from ", transport_.PeerName(recv->op.peer),
            " carried ", message.bytes.size(), "; post receives of the size the peer sends"));
      }
      std::memcpy(recv->host.raw_data(), message.bytes.data(), message.bytes.size());
      unexpected_bytes_ -= message.bytes.size();
      kept->second.pop_front();
      LOCKSTEP_RETURN_IF_ERROR(Finish(*recv));
      continue;
    }
    posted_[key].push_back(std::move(recv));
  }
  // Every peer with a posted receive gets a router, one at a time.
  for (const auto& [key, queue] : posted_) {
    if (queue.empty() || router_active_[key.first]) continue;
    router_active_[key.first] = true;
    more->push_back(Router(key.first));
  }
  return absl::OkStatus();
}

Transfer PointToPointEngine::Router(int peer) {
  // What the routed message turned out to be, for on_done.
  struct Routed {
    std::unique_ptr<PostedRecv> recv;  // A posted receive it matched...
    Key key;                            // ...or the key it is kept under,
    Kept kept;                          // with its bytes.
  };
  auto routed = std::make_shared<Routed>();
  Transfer t = Transfer::Recv(peer, nullptr, 0);
  t.route = [this, peer, routed](const MessageTag& tag, size_t bytes) -> absl::StatusOr<void*> {
    if ((tag.tag & kPointToPointTagBit) == 0 || tag.tag >= 0xFFFFFF00u) {
      return absl::InternalError(absl::StrCat(
          "collective mismatch: rank ", transport_.rank(), " waits for a point-to-point message from ",
          transport_.PeerName(peer), ", which sent op #", tag.seq, " ", DescribeTag(tag.tag),
          " instead. Both ranks must post the same collectives and sends/receives between them"));
    }
    const Key key{peer, tag.tag & ~kPointToPointTagBit};
    auto posted = posted_.find(key);
    if (posted != posted_.end() && !posted->second.empty() && posted->second.front()->op.seq == tag.seq) {
      std::unique_ptr<PostedRecv>& recv = posted->second.front();
      if (tag.element != 0 && tag.element != ElementOf(recv->op.tensor)) return TypeMismatch(recv->op, tag.element);
      if (recv->host.nbytes() != bytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Recv #", recv->op.seq, " from rank ", peer, " (tag ", key.second, ") expects ", recv->host.nbytes(),
            " bytes, but the matching Send from ", transport_.PeerName(peer), " carries ", bytes,
            "; post receives of the size the peer sends"));
      }
      routed->recv = std::move(recv);
      posted->second.pop_front();
      return routed->recv->host.raw_data();
    }
    // No receive for it yet: keep it, within the limit.
    if (unexpected_bytes_ + bytes > unexpected_limit_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "rank ", transport_.rank(), " got a message from ", transport_.PeerName(peer), " with tag ", key.second,
          " (", bytes, " bytes, its send #", tag.seq, ") before posting a Recv for it, and ", unexpected_bytes_,
          " bytes of such messages are already kept; the limit is ", unexpected_limit_,
          " (AlgorithmOptions::unexpected_bytes_limit). Post that Recv earlier, or raise the limit"));
    }
    unexpected_bytes_ += bytes;
    routed->key = key;
    routed->kept.seq = tag.seq;
    routed->kept.element = tag.element;
    routed->kept.bytes.resize(bytes);
    return static_cast<void*>(routed->kept.bytes.data());
  };
  t.on_done = [this, peer, routed]() -> absl::Status {
    router_active_[peer] = false;  // The feed's next Poll adds another if needed.
    if (routed->recv != nullptr) return Finish(*routed->recv);
    kept_[routed->key].push_back(std::move(routed->kept));
    return absl::OkStatus();
  };
  return t;
}

}  // namespace lockstep
