#include "collectives/transport/shm/shm_transport.h"

#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "collectives/transport/shm/shm_copy.h"
#include "collectives/transport/shm/shm_layout.h"
#include "collectives/transport/shm/shm_op.h"
#include "collectives/transport/transport_errors.h"
#include "core/status.h"

namespace lockstep {

using shm_internal::Errno;
using shm_internal::kControlBytes;
using shm_internal::kMaxAbortReason;
using shm_internal::RingStride;

namespace {

// CPUs the processes of this host may run on: the cgroup's cpuset where
// one is readable (a container's share of a large machine), else the
// online CPUs.
int HostCpus() {
  std::ifstream cpuset("/sys/fs/cgroup/cpuset.cpus.effective");
  std::string list;
  int cpus = 0;
  if (cpuset && std::getline(cpuset, list)) {
    for (absl::string_view range : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
      const std::vector<absl::string_view> ends = absl::StrSplit(range, '-');
      int first = 0, last = 0;
      if (!absl::SimpleAtoi(ends[0], &first)) return static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
      last = first;
      if (ends.size() == 2 && !absl::SimpleAtoi(ends[1], &last)) {
        return static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
      }
      cpus += last - first + 1;
    }
  }
  return cpus > 0 ? cpus : static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
}

std::chrono::microseconds PauseFor(const ShmTransportOptions& options, int size) {
  if (options.pause_microseconds >= 0) return std::chrono::microseconds(options.pause_microseconds);
  return std::chrono::microseconds(size > HostCpus() ? 0 : 20);
}

}  // namespace

ShmTransport::ShmTransport(int rank, int size, const ShmTransportOptions& options)
    : rank_(rank),
      size_(size),
      options_(options),
      pause_(PauseFor(options, size)),
      ring_bytes_(options.slot_bytes * static_cast<size_t>(options.slots)),
      segments_(static_cast<size_t>(size)),
      peers_(static_cast<size_t>(size)),
      tail_seen_(static_cast<size_t>(size)),
      single_copy_to_(static_cast<size_t>(size), 0),
      single_copy_refused_(static_cast<size_t>(size)),
      traffic_(size) {}

ShmTransport::~ShmTransport() {
  for (Mapping& m : segments_) {
    if (m.address != nullptr) ::munmap(m.address, m.bytes);
  }
}

ShmTransport::Control* ShmTransport::ControlOf(int rank) const {
  return static_cast<Control*>(segments_[rank].address);
}

ShmTransport::Ring* ShmTransport::RingOf(int from, int to) const {
  char* base = static_cast<char*>(segments_[to].address);
  return reinterpret_cast<Ring*>(base + kControlBytes + RingStride(ring_bytes_) * static_cast<size_t>(from));
}

void ShmTransport::RingDoorbell(int peer) const {
  const uint64_t one = 1;
  (void)!::write(peers_[peer].doorbell.get(), &one, sizeof(one));
}

bool ShmTransport::SingleCopyTo(int peer) const { return peer >= 0 && peer < size_ && single_copy_to_[peer] != 0; }

std::string ShmTransport::CopyPath() const {
  if (options_.single_copy_bytes == 0) return "ring only (single copy off)";
  std::vector<std::string> single, ring;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    if (single_copy_to_[peer] != 0) {
      single.push_back(absl::StrCat(peer));
    } else {
      ring.push_back(absl::StrCat(peer, " (", single_copy_refused_[peer], ")"));
    }
  }
  if (single.empty() && ring.empty()) return "ring only (one rank)";
  std::string out;
  if (!single.empty()) {
    out = absl::StrCat("single-copy (process_vm_readv) for messages of ", options_.single_copy_bytes, "..",
                       options_.single_copy_max_bytes, " bytes to ",
                       ring.empty() ? std::string("every peer") : absl::StrCat("ranks ", absl::StrJoin(single, ",")));
  }
  if (!ring.empty()) {
    absl::StrAppend(&out, out.empty() ? "" : "; ", "ring only to ranks ", absl::StrJoin(ring, ", "));
  }
  return out;
}

std::string ShmTransport::PeerName(int peer) const {
  if (peer < 0 || peer >= size_ || peer == rank_) return absl::StrCat("rank ", peer);
  return absl::StrCat("rank ", peer, " (shm, pid ", peers_[peer].pid, ")");
}

void ShmTransport::Abort(absl::string_view reason) {
  if (aborted_.exchange(true) || size_ == 1) return;
  Control* c = ControlOf(rank_);
  const size_t n = std::min(reason.size(), kMaxAbortReason);
  std::memcpy(c->reason, reason.data(), n);
  c->reason_bytes = static_cast<uint32_t>(n);
  c->aborted.store(1, std::memory_order_release);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    RingDoorbell(peer);
    ::shutdown(peers_[peer].socket.get(), SHUT_RDWR);
  }
  // Our own waiting thread, if any, wakes up and sees the flag.
  const uint64_t one = 1;
  (void)!::write(doorbell_.get(), &one, sizeof(one));
}

TrafficCounters ShmTransport::Traffic() const { return traffic_.Snapshot(); }

absl::Status ShmTransport::Exchange(absl::Span<Transfer> transfers, MessageTag tag, Deadline deadline) {
  return Run(transfers, tag, deadline, nullptr);
}

absl::Status ShmTransport::ExchangeOpen(TransferFeed& feed, Deadline deadline) {
  return Run({}, MessageTag{}, deadline, &feed);
}

absl::Status ShmTransport::PeerGoneError(int peer, uint64_t seq) const {
  const Control* c = ControlOf(peer);
  if (c->aborted.load(std::memory_order_acquire) != 0) {
    const std::string reason(c->reason, std::min<size_t>(c->reason_bytes, kMaxAbortReason));
    return absl::UnavailableError(absl::StrCat(PeerName(peer), " aborted during op #", seq, " because: ", reason));
  }
  return absl::UnavailableError(
      absl::StrCat(PeerName(peer), " closed the connection during op #", seq,
                   " (the process died, exited, or aborted after an error of its own; see its log)"));
}

absl::Status ShmTransport::Run(absl::Span<Transfer> initial, MessageTag tag, Deadline deadline, TransferFeed* feed) {
  if (aborted_.load(std::memory_order_relaxed)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ShmTransport: rank ", rank_, " aborted after an earlier error",
        size_ > 1 ? absl::StrCat(" (", ControlOf(rank_)->Reason(), ")") : "", "; create a new communicator"));
  }
  return Op(*this, initial, tag, deadline, feed).Run();
}

ShmTransport::Op::Op(ShmTransport& transport, absl::Span<Transfer> initial, MessageTag tag, Deadline deadline,
                     TransferFeed* feed)
    : tr_(transport),
      streams_(initial, transport.rank_, transport.size_, "ShmTransport"),
      tag_(tag),
      deadline_(deadline),
      feed_(feed),
      capacity_(transport.ring_bytes_),
      slot_(transport.options_.slot_bytes),
      me_(transport.size_ > 1 ? transport.ControlOf(transport.rank_) : nullptr) {}

absl::Status ShmTransport::Op::Run() {
  absl::Status status = RunRounds();
  FlushNotifies();
  return status;
}

absl::Status ShmTransport::Op::RunRounds() {
  LOCKSTEP_RETURN_IF_ERROR(streams_.Start(feed_));
  while (true) {
    if (streams_.remaining == 0) {
      const size_t before = streams_.total;
      LOCKSTEP_RETURN_IF_ERROR(streams_.PollFeed(feed_));
      if (streams_.total == before) break;
    }
    bool moved = false;
    for (size_t stream = 0; stream < streams_.current.size(); ++stream) {
      if (streams_.current[stream] != kNone) LOCKSTEP_RETURN_IF_ERROR(Step(stream, &moved));
    }
    if (feed_ != nullptr) {
      const size_t before = streams_.total;
      LOCKSTEP_RETURN_IF_ERROR(streams_.PollFeed(feed_));
      moved |= streams_.total != before;
    }
    if (streams_.remaining == 0) continue;
    if (moved) {
      idle_rounds_ = 0;
      // A sleeping peer is told within a few rounds, however long this
      // rank keeps moving.
      if (++rounds_untold_ >= kRoundsUntold) FlushNotifies();
      continue;
    }
    // Only receives that are no longer needed wait: done.
    if (feed_ != nullptr && streams_.OnlyDroppableLeft([](const Progress& p) { return p.header_done; })) {
      return absl::OkStatus();
    }
    // Nothing moved. A peer that is gone cannot move it any more.
    LOCKSTEP_RETURN_IF_ERROR(CheckAlive());
    // The peers are told once this rank has waited a few rounds (its
    // stores have reached the cache by then: the fence costs nothing), and
    // always before it sleeps: a peer never sleeps on a move it was not
    // told of.
    if (idle_rounds_ >= kRoundsUntold) FlushNotifies();
    if (Spin()) continue;
    FlushNotifies();
    if (SteadyClock::now() >= deadline_) break;
    LOCKSTEP_RETURN_IF_ERROR(Sleep());
  }
  if (streams_.remaining == 0) return absl::OkStatus();
  return ExchangeTimeoutError(Seq(), tr_.rank_, streams_.InFlight([this](int peer) { return tr_.PeerName(peer); }));
}

MessageTag ShmTransport::Op::TagOf(const Transfer& t) const { return TransferTag(t, tag_); }

uint64_t ShmTransport::Op::Seq() { return streams_.total > 0 ? TagOf(streams_.at(0)).seq : tag_.seq; }

bool ShmTransport::Op::SendsSingleCopy(const Transfer& t) const {
  const ShmTransportOptions& o = tr_.options_;
  return o.single_copy_bytes != 0 && t.bytes >= o.single_copy_bytes && t.bytes <= o.single_copy_max_bytes &&
         tr_.single_copy_to_[t.peer] != 0;
}

void ShmTransport::Op::Notify(int peer) {
  if (std::find(notify_.begin(), notify_.end(), peer) == notify_.end()) notify_.push_back(peer);
}

void ShmTransport::Op::FlushNotifies() {
  if (notify_.empty()) return;
  // The fence orders our index stores before the loads of the flags; the
  // sleeper orders its flag store before its index loads.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int peer : notify_) {
    if (tr_.ControlOf(peer)->sleeping.load(std::memory_order_relaxed) != 0) tr_.RingDoorbell(peer);
  }
  notify_.clear();
  rounds_untold_ = 0;
}

bool ShmTransport::Op::PeerHungUp(int peer) {
  Peer& p = tr_.peers_[peer];
  if (p.gone) return true;
  pollfd fd{p.socket.get(), POLLIN, 0};
  if (::poll(&fd, 1, 0) > 0 && fd.revents != 0) p.gone = true;
  return p.gone;
}

absl::Status ShmTransport::Op::CheckAlive() {
  for (size_t stream = 0; stream < streams_.current.size(); ++stream) {
    if (streams_.current[stream] == kNone) continue;
    const int peer = streams_.at(streams_.current[stream]).peer;
    if (tr_.peers_[peer].gone || tr_.ControlOf(peer)->aborted.load(std::memory_order_acquire) != 0) {
      const size_t first = streams_.current[2 * peer] != kNone ? 2 * peer : 2 * peer + 1;
      return tr_.PeerGoneError(peer, TagOf(streams_.at(streams_.current[first])).seq);
    }
  }
  if (me_->aborted.load(std::memory_order_acquire) != 0) {
    return absl::UnavailableError(
        absl::StrCat("ShmTransport: rank ", tr_.rank_, " was aborted during op #", Seq(), " (", me_->Reason(), ")"));
  }
  return absl::OkStatus();
}

bool ShmTransport::Op::AnyCouldMove() {
  for (size_t stream = 0; stream < streams_.current.size(); ++stream) {
    if (streams_.current[stream] != kNone && CouldMove(stream)) return true;
  }
  return false;
}

bool ShmTransport::Op::Spin() {
  // The clock is read every 16th idle round only, the first time at the
  // 16th: a peer that answers within those rounds (the common case) costs
  // no clock read, and the spin's time counts from there. Until pause_ has
  // passed the core pauses (a peer on its own core answers in about a
  // microsecond); after that each round yields the core, in case the peer
  // waits for it (more ranks than cores; then pause_ is 0 and every round
  // yields).
  const auto pause_only = tr_.pause_;
  const auto spin = std::chrono::microseconds(tr_.options_.spin_microseconds);
  if (spin.count() == 0) return false;
  ++idle_rounds_;
  if ((idle_rounds_ & 15) == 0) {
    now_ = SteadyClock::now();
    if (idle_rounds_ == 16) spin_start_ = now_;
    if (now_ >= spin_start_ + spin || now_ >= deadline_) return false;
  }
  if (pause_only.count() > 0 && (idle_rounds_ < 16 || now_ < spin_start_ + pause_only)) {
    // Between full rounds (each checks liveness, steps every stream and
    // now and then reads the clock) only the indices are watched: the
    // peer's index store is seen within a pause, not within a round.
    for (int i = 0; i < kWatchPauses; ++i) {
      shm_internal::CpuRelax();
      if (AnyCouldMove()) break;
    }
  } else {
    sched_yield();
  }
  return true;
}

absl::Status ShmTransport::Op::Sleep() {
  idle_rounds_ = 0;
  // Poll the sockets of the peers we wait for (their hang-up), the
  // doorbell and the feed's wake fd.
  fds_.clear();
  fd_peer_.clear();
  bool any_waits = false;
  for (size_t stream = 0; stream < streams_.current.size(); ++stream) {
    if (streams_.current[stream] == kNone) continue;
    const Transfer& t = streams_.at(streams_.current[stream]);
    const Progress& p = streams_.progress[streams_.current[stream]];
    if (t.kind == Transfer::Kind::kSend && p.header_done) {
      const size_t allowed = SendableBytes(t);
      // Waits for our own receives (a single-copy send: with every exposed
      // byte acknowledged).
      if (p.single ? p.exposed >= allowed && p.done >= p.exposed : p.done >= allowed) continue;
    }
    any_waits = true;
    if (std::find(fd_peer_.begin(), fd_peer_.end(), t.peer) == fd_peer_.end()) {
      fds_.push_back({tr_.peers_[t.peer].socket.get(), POLLIN, 0});
      fd_peer_.push_back(t.peer);
    }
  }
  if (!any_waits) {
    return absl::InternalError(
        "ShmTransport::Exchange: every pending send waits for data that no receive will produce");
  }
  fds_.push_back({tr_.doorbell_.get(), POLLIN, 0});
  const bool wake = feed_ != nullptr && feed_->wake_fd() >= 0;
  if (wake) fds_.push_back({feed_->wake_fd(), POLLIN, 0});
  // Announce the sleep, then look once more: a writer that moved an index
  // before seeing the flag will not ring.
  me_->sleeping.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (AnyCouldMove()) {
    me_->sleeping.store(0, std::memory_order_relaxed);
    return absl::OkStatus();
  }
  int timeout_ms = PollTimeoutMs(deadline_);
  if (feed_ != nullptr && !wake) timeout_ms = std::min(timeout_ms, 1);
  const int rc = ::poll(fds_.data(), fds_.size(), timeout_ms);
  if (rc < 0 && errno != EINTR) {
    me_->sleeping.store(0, std::memory_order_relaxed);
    return Errno("ShmTransport: poll");
  }
  for (size_t k = 0; k < fd_peer_.size(); ++k) {
    if (fds_[k].revents != 0) tr_.peers_[fd_peer_[k]].gone = true;  // Nothing is sent on it: EOF or error.
  }
  uint64_t drained;
  (void)!::read(tr_.doorbell_.get(), &drained, sizeof(drained));
  me_->sleeping.store(0, std::memory_order_relaxed);
  return absl::OkStatus();
}

}  // namespace lockstep
