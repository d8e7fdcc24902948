#include "collectives/testing/fake_transport.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"

namespace lockstep {
namespace testing {
namespace {

struct Header {
  uint64_t seq = 0;
  uint32_t tag = 0;
  uint64_t bytes = 0;
  uint8_t element = 0;
};
constexpr size_t kHeaderBytes = 64;  // Counted against capacity, as TCP's.

// One direction between two ranks.
struct Channel {
  std::deque<Header> headers;  // Messages started by the sender.
  std::deque<char> bytes;      // Their payloads, back to back.
  size_t used = 0;             // Bytes buffered, headers included.
  bool closed = false;
  std::string reason;  // Why the sender aborted.
};

struct Network {
  Network(int n, FakeNetworkOptions o) : size(n), options(o), channels(static_cast<size_t>(n) * n) {}
  Channel& channel(int from, int to) { return channels[static_cast<size_t>(from) * size + to]; }

  const int size;
  const FakeNetworkOptions options;
  std::mutex mu;
  std::condition_variable changed;
  std::vector<Channel> channels;
};

struct Progress {
  bool header_done = false;
  size_t done = 0;
  size_t reported = 0;
};

class FakeTransport : public Transport {
 public:
  FakeTransport(std::shared_ptr<Network> net, int rank)
      : net_(std::move(net)),
        rank_(rank),
        sent_(new std::atomic<uint64_t>[net_->size]()),
        received_(new std::atomic<uint64_t>[net_->size]()) {}

  int rank() const override { return rank_; }
  int size() const override { return net_->size; }
  std::string PeerName(int peer) const override { return absl::StrCat("rank ", peer, " (fake)"); }

  absl::Status Exchange(absl::Span<Transfer> transfers, MessageTag tag, Deadline deadline) override {
    return Run(transfers, tag, deadline, nullptr);
  }
  absl::Status ExchangeOpen(TransferFeed& feed, Deadline deadline) override {
    return Run({}, MessageTag{}, deadline, &feed);
  }
  TrafficCounters Traffic() const override {
    TrafficCounters c;
    for (int p = 0; p < size(); ++p) {
      c.bytes_sent.push_back(sent_[p].load());
      c.bytes_received.push_back(received_[p].load());
    }
    return c;
  }
  void Abort(absl::string_view reason) override {
    std::lock_guard<std::mutex> lock(net_->mu);
    aborted_ = true;
    for (int p = 0; p < size(); ++p) {
      if (p == rank_) continue;
      Channel& out = net_->channel(rank_, p);
      out.closed = true;
      out.reason = std::string(reason);
      net_->channel(p, rank_).closed = true;
    }
    net_->changed.notify_all();
  }

 private:
  absl::Status Run(absl::Span<Transfer> initial, MessageTag tag, Deadline deadline, TransferFeed* feed);

  std::shared_ptr<Network> net_;
  const int rank_;
  bool aborted_ = false;
  std::unique_ptr<std::atomic<uint64_t>[]> sent_, received_;
};

absl::Status FakeTransport::Run(absl::Span<Transfer> initial, MessageTag tag, Deadline deadline, TransferFeed* feed) {
  std::vector<std::unique_ptr<Transfer>> transfers;
  for (Transfer& t : initial) transfers.push_back(std::make_unique<Transfer>(t));
  std::vector<Progress> progress(transfers.size());
  std::vector<bool> complete(transfers.size(), false);
  size_t remaining = transfers.size();
  auto take_feed = [&] {
    if (feed == nullptr) return;
    std::vector<Transfer> more;
    feed->Poll(&more);
    for (Transfer& t : more) {
      transfers.push_back(std::make_unique<Transfer>(std::move(t)));
      progress.emplace_back();
      complete.push_back(false);
      ++remaining;
    }
  };
  auto tag_of = [&](const Transfer& t) {
    return MessageTag{t.seq >= 0 ? static_cast<uint64_t>(t.seq) : tag.seq,
                      t.tag >= 0 ? static_cast<uint32_t>(t.tag) : tag.tag, t.element != 0 ? t.element : tag.element};
  };
  for (const auto& t : transfers) {
    if (t->peer < 0 || t->peer >= size() || t->peer == rank_) {
      return absl::InvalidArgumentError(absl::StrCat("FakeTransport: bad peer ", t->peer, " for rank ", rank_));
    }
  }
  take_feed();
  std::unique_lock<std::mutex> lock(net_->mu);
  if (aborted_) return absl::FailedPreconditionError("FakeTransport: aborted");
  while (true) {
    bool moved = false;
    // The first incomplete transfer of each (peer, direction) stream runs.
    std::vector<bool> busy(2 * static_cast<size_t>(size()), false);
    for (size_t i = 0; i < transfers.size(); ++i) {
      if (complete[i]) continue;
      Transfer& t = *transfers[i];
      const size_t stream = 2 * t.peer + (t.kind == Transfer::Kind::kRecv ? 1 : 0);
      if (busy[stream]) continue;
      busy[stream] = true;
      Progress& p = progress[i];
      const MessageTag mt = tag_of(t);
      if (t.kind == Transfer::Kind::kSend) {
        Channel& ch = net_->channel(rank_, t.peer);
        if (ch.closed) {
          return absl::UnavailableError(
              absl::StrCat("sending op #", mt.seq, " to ", PeerName(t.peer), " failed: connection closed"));
        }
        if (!p.header_done && ch.used + kHeaderBytes <= net_->options.capacity_bytes) {
          ch.headers.push_back(Header{mt.seq, mt.tag, t.bytes, mt.element});
          ch.used += kHeaderBytes;
          p.header_done = true;
          moved = true;
        }
        if (p.header_done) {
          const size_t allowed = t.ready ? std::min(t.ready(), t.bytes) : t.bytes;
          const size_t room = net_->options.capacity_bytes - std::min(ch.used, net_->options.capacity_bytes);
          const size_t n = std::min(room, allowed - std::min(allowed, p.done));
          if (n > 0) {
            const char* src = static_cast<const char*>(t.data) + p.done;
            ch.bytes.insert(ch.bytes.end(), src, src + n);
            ch.used += n;
            p.done += n;
            sent_[t.peer] += n;
            moved = true;
          }
        }
      } else {
        Channel& ch = net_->channel(t.peer, rank_);
        if (!p.header_done && !ch.headers.empty()) {
          const Header h = ch.headers.front();
          if (t.route) {
            lock.unlock();  // The route may allocate or take other locks.
            absl::StatusOr<void*> dest = t.route(MessageTag{h.seq, h.tag, h.element}, h.bytes);
            lock.lock();
            if (!dest.ok()) return dest.status();
            if (*dest == LeaveMessage()) {
              // Left for the next receive from this peer: header and bytes stay.
              t.data = nullptr;
              t.bytes = 0;
              p.header_done = true;
              complete[i] = true;
              --remaining;
              moved = true;
              if (t.on_done) LOCKSTEP_RETURN_IF_ERROR(t.on_done());
              continue;
            }
            t.data = *dest;
            t.bytes = h.bytes;
          } else if (h.seq != mt.seq || h.tag != mt.tag || h.bytes != t.bytes) {
            return absl::InternalError(absl::StrCat("collective mismatch: ", PeerName(t.peer), " sent op #", h.seq, " ",
                                                    DescribeTag(h.tag), " with ", h.bytes, " bytes, but rank ", rank_,
                                                    " expected op #", mt.seq, " ", DescribeTag(mt.tag), " with ",
                                                    t.bytes, " bytes"));
          } else if (h.element != 0 && mt.element != 0 && h.element != mt.element) {
            return absl::InternalError(absl::StrCat("collective mismatch: ", PeerName(t.peer), " sent op #", h.seq,
                                                    " with ", ElementName(h.element), " elements, but rank ", rank_,
                                                    " expected ", ElementName(mt.element)));
          }
          ch.headers.pop_front();
          ch.used -= kHeaderBytes;
          p.header_done = true;
          moved = true;
        }
        if (p.header_done) {
          const size_t n = std::min(ch.bytes.size(), t.bytes - p.done);
          if (n > 0) {
            std::copy_n(ch.bytes.begin(), n, static_cast<char*>(t.data) + p.done);
            ch.bytes.erase(ch.bytes.begin(), ch.bytes.begin() + static_cast<std::ptrdiff_t>(n));
            ch.used -= n;
            p.done += n;
            received_[t.peer] += n;
            moved = true;
          }
          if (t.on_segment) {
            const size_t seg = t.segment_bytes == 0 ? std::max<size_t>(t.bytes, 1) : t.segment_bytes;
            while (p.reported < t.bytes && p.done - p.reported >= std::min(seg, t.bytes - p.reported)) {
              const size_t len = std::min(seg, t.bytes - p.reported);
              LOCKSTEP_RETURN_IF_ERROR(t.on_segment(p.reported, len));
              p.reported += len;
            }
          }
        } else if (ch.closed) {
          return absl::UnavailableError(absl::StrCat(PeerName(t.peer), " aborted during op #", mt.seq,
                                                     ch.reason.empty() ? "" : " because: ", ch.reason));
        }
      }
      if (p.header_done && p.done == t.bytes) {
        if (t.kind == Transfer::Kind::kRecv && t.on_segment && t.bytes == 0) {
          LOCKSTEP_RETURN_IF_ERROR(t.on_segment(0, 0));
        }
        complete[i] = true;
        --remaining;
        moved = true;
        if (t.on_done) LOCKSTEP_RETURN_IF_ERROR(t.on_done());
      }
    }
    if (moved) net_->changed.notify_all();
    if (feed != nullptr) {
      lock.unlock();
      const size_t before = transfers.size();
      take_feed();
      lock.lock();
      moved |= transfers.size() != before;
    }
    if (remaining == 0 && !moved) return absl::OkStatus();
    if (moved) continue;
    if (feed != nullptr) {
      // Only receives that are no longer needed wait: done.
      bool droppable_only = true;
      for (size_t i = 0; i < transfers.size() && droppable_only; ++i) {
        if (complete[i]) continue;
        const Transfer& t = *transfers[i];
        droppable_only = t.droppable && !progress[i].header_done && t.droppable();
      }
      if (droppable_only) return absl::OkStatus();
    }
    if (SteadyClock::now() >= deadline) break;
    // Feeds are re-polled every millisecond; otherwise sleep until a channel
    // changes.
    const Deadline until = feed != nullptr ? std::min(deadline, DeadlineIn(std::chrono::milliseconds(1))) : deadline;
    net_->changed.wait_until(lock, until);
  }
  std::vector<std::string> waiting;
  for (size_t i = 0; i < transfers.size(); ++i) {
    if (complete[i]) continue;
    waiting.push_back(absl::StrCat(transfers[i]->kind == Transfer::Kind::kSend ? "sending to " : "receiving from ",
                                   PeerName(transfers[i]->peer), " (", progress[i].done, " of ", transfers[i]->bytes,
                                   " bytes)"));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("op #", tag.seq, " timed out on rank ", rank_, " while ", absl::StrJoin(waiting, "; ")));
}

}  // namespace

std::vector<std::unique_ptr<Transport>> FakeNetwork::Create(int size, FakeNetworkOptions options) {
  auto net = std::make_shared<Network>(size, options);
  std::vector<std::unique_ptr<Transport>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_unique<FakeTransport>(net, r));
  return out;
}

}  // namespace testing
}  // namespace lockstep
