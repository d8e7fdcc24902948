#include "collectives/store/tcp_store.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <iterator>
#include <list>
#include <map>
#include <optional>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "collectives/store/store_ops.h"
#include "core/status.h"

namespace lockstep {
namespace {

namespace wire = store_wire;

constexpr char kWorkersKey[] = "__lockstep/store_workers";
constexpr char kWorkersDoneKey[] = "__lockstep/store_workers_done";

// Per epoll round and connection: bytes read at most (so one client sending
// a 64 MiB value does not hold the loop), and connections accepted at most.
constexpr size_t kReadBudgetPerRound = 1 << 20;
constexpr int kAcceptsPerRound = 64;
// How long the listener is left alone after accept() ran out of descriptors.
constexpr Milliseconds kAcceptBackoff{100};
// Buffers larger than this are released once drained, so one large value does
// not stay allocated for the connection's lifetime.
constexpr size_t kKeptBufferCapacity = 64 << 10;

// One client connection on the server side.
struct Connection {
  Fd fd;
  // The current request frame only: header, then body (never more).
  std::string in;
  wire::FrameHeader header;  // Valid once `in` holds kHeaderBytes.
  Deadline frame_deadline;   // For the frame in `in`, set at its first byte.
  std::string out;           // At most one reply (see ServerLoop::WantsInput).
  size_t out_offset = 0;
  Deadline out_deadline;  // For the reply in `out`.
  Deadline hello_deadline;
  bool hello = false;  // HELLO accepted.
  bool close_after_flush = false;
  bool dead = false;
  std::optional<wire::Request> pending;  // A GET/WAIT waiting for keys.
  Deadline pending_deadline;
  // How many of the pending request's keys were missing when last counted,
  // and which request that was (ServerLoop::waiters_ entries name it).
  size_t missing = 0;
  uint64_t pending_serial = 0;
  uint32_t interest = 0;  // The epoll events registered for it.
  int64_t accounted = 0;  // Its buffers' capacity, as counted in stats.
  bool touched = false;   // In ServerLoop::touched_ this round.
  std::list<Connection>::iterator self;

  bool out_pending() const { return out_offset < out.size(); }
};

void ReleaseIfLarge(std::string& buffer) {
  if (buffer.capacity() > kKeptBufferCapacity) std::string().swap(buffer);
}

wire::Response Ok(std::string value = "", int64_t integer = 0) {
  return wire::Response{absl::StatusCode::kOk, std::move(value), integer};
}

wire::Response Error(const absl::Status& s) { return wire::Response{s.code(), std::string(s.message()), 0}; }

// The server's state and request handling, owned by its thread.
class ServerLoop {
 public:
  using Publish = std::function<void(const TcpStoreServerStats&)>;

  ServerLoop(int listen_fd, int wake_fd, std::string token, TcpStoreLimits limits, Publish publish)
      : listen_fd_(listen_fd),
        wake_fd_(wake_fd),
        token_(std::move(token)),
        limits_(limits),
        publish_(std::move(publish)),
        read_buffer_(64 << 10) {}

  // One epoll round: the events, then the connections they (or a woken
  // wait, or an expired deadline) touched are re-armed or dropped. Nothing
  // here visits the idle connections; the deadline scan runs only when the
  // earliest deadline it knows of has come (TrackDeadline).
  void Run() {
    epoll_ = Fd(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_.valid() || !Register(wake_fd_, EPOLLIN, kWakeTag) || !Register(listen_fd_, EPOLLIN, kListenTag)) {
      return;
    }
    std::vector<epoll_event> events(1024);
    while (true) {
      const bool listening = UpdateListener();
      const int n = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()),
                                 PollTimeoutMs(NextWake(listening)));
      if (n < 0 && errno != EINTR) return;
      bool changed = false;
      bool accept = false;
      for (int i = 0; i < n; ++i) {
        const uint64_t tag = events[static_cast<size_t>(i)].data.u64;
        if (tag == kWakeTag) return;  // Stop requested.
        if (tag == kListenTag) {
          accept = true;
          continue;
        }
        Connection& c = *reinterpret_cast<Connection*>(tag);
        Touch(c);
        if (c.dead) continue;
        const uint32_t revents = events[static_cast<size_t>(i)].events;
        if (revents & EPOLLIN) {
          changed |= ReadAndHandle(c);
        } else if (revents & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
          c.dead = true;  // Closed or reset: drop it and any pending wait.
        }
        if (!c.dead && (revents & EPOLLOUT)) Flush(c);
      }
      if (accept) AcceptSome();
      if (changed) WakeWaiters();
      if (SteadyClock::now() >= next_deadline_) ExpireDeadlines();
      Settle();
      PublishStats();
    }
  }

 private:
  // A connection's next request is read only once its reply is sent and it is
  // not parked: one buffered frame and one queued reply per client at most.
  static bool WantsInput(const Connection& c) {
    return !c.dead && !c.close_after_flush && !c.pending && !c.out_pending();
  }

  static constexpr uint64_t kWakeTag = 1;
  static constexpr uint64_t kListenTag = 2;

  bool Register(int fd, uint32_t events, uint64_t tag) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tag;
    return ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) == 0;
  }

  // The listener rests (no events) while at the connection limit or backing
  // off from EMFILE; pending connections wait in the kernel's backlog.
  bool UpdateListener() {
    const bool at_limit = static_cast<int64_t>(conns_.size()) >= limits_.max_connections;
    if (at_limit) ++stats_.accept_limit_pauses;
    const bool listening = !at_limit && SteadyClock::now() >= accept_resume_;
    if (listening != listener_armed_) {
      epoll_event ev{};
      ev.events = listening ? static_cast<uint32_t>(EPOLLIN) : 0u;
      ev.data.u64 = kListenTag;
      ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, listen_fd_, &ev);
      listener_armed_ = listening;
    }
    return listening;
  }

  Deadline NextWake(bool listening) const {
    Deadline wake = next_deadline_;
    if (!listening && accept_resume_ > SteadyClock::now()) wake = std::min(wake, accept_resume_);
    return wake;
  }

  // Every deadline set goes through here: the loop wakes for the earliest.
  void TrackDeadline(Deadline deadline) { next_deadline_ = std::min(next_deadline_, deadline); }

  void Touch(Connection& c) {
    if (!c.touched) {
      c.touched = true;
      touched_.push_back(&c);
    }
  }

  // The end of a round, for each connection something happened to: drop it
  // if it is done for, else register the events it now waits for.
  void Settle() {
    for (Connection* cp : touched_) {
      Connection& c = *cp;
      c.touched = false;
      Account(c);
      if (c.dead || (c.close_after_flush && !c.out_pending())) {
        Unpark(c);
        stats_.authenticated -= c.hello ? 1 : 0;
        stats_.buffered_bytes -= c.accounted;
        ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
        conns_.erase(c.self);
        continue;
      }
      // EPOLLRDHUP: a client that closes while its reads are paused (a parked
      // GET, an undrained reply) is still noticed and dropped.
      uint32_t interest = EPOLLRDHUP;
      if (WantsInput(c)) interest |= EPOLLIN;
      if (c.out_pending()) interest |= EPOLLOUT;
      if (interest != c.interest) {
        epoll_event ev{};
        ev.events = interest;
        ev.data.u64 = reinterpret_cast<uint64_t>(&c);
        if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev) == 0) c.interest = interest;
      }
    }
    touched_.clear();
  }

  // Keeps stats_.buffered_bytes equal to the sum of the buffers' capacity.
  void Account(Connection& c) {
    const int64_t now = static_cast<int64_t>(c.in.capacity() + c.out.capacity());
    stats_.buffered_bytes += now - c.accounted;
    c.accounted = now;
  }

  void AcceptSome() {
    for (int i = 0; i < kAcceptsPerRound && static_cast<int64_t>(conns_.size()) < limits_.max_connections; ++i) {
      Fd fd(::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!fd.valid()) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // The listener stays readable while accept() cannot succeed: rest
          // it instead of spinning, and keep serving the connected clients.
          accept_resume_ = DeadlineIn(kAcceptBackoff);
          ++stats_.accept_backoffs;
          return;
        }
        if (errno == ECONNABORTED || errno == EINTR) continue;
        return;  // EAGAIN: the backlog is empty.
      }
      TuneSocket(fd.get(), 0);
      conns_.emplace_back();
      Connection& c = conns_.back();
      c.self = std::prev(conns_.end());
      c.fd = std::move(fd);
      c.hello_deadline = DeadlineIn(limits_.hello_timeout);
      TrackDeadline(c.hello_deadline);
      c.interest = EPOLLIN | EPOLLRDHUP;
      if (!Register(c.fd.get(), c.interest, reinterpret_cast<uint64_t>(&c))) {
        conns_.pop_back();
        continue;
      }
    }
  }

  // Bytes still missing from the current frame.
  static size_t FrameBytesWanted(const Connection& c) {
    if (c.in.size() < wire::kHeaderBytes) return wire::kHeaderBytes - c.in.size();
    return wire::kHeaderBytes + c.header.body_bytes - c.in.size();
  }

  // Validates a complete header. Before HELLO only a small HELLO is
  // accepted, so an unauthenticated client cannot make the server buffer a
  // large frame.
  bool AcceptHeader(Connection& c) {
    absl::StatusOr<wire::FrameHeader> header = wire::ParseHeader(absl::string_view(c.in).substr(0, wire::kHeaderBytes));
    if (!header.ok()) return false;
    if (!c.hello && (header->op != wire::Op::kHello || header->body_bytes > wire::kMaxHelloBodyBytes)) {
      return false;
    }
    c.header = *header;
    return true;
  }

  // Reads at most the rest of the current frame (bounded per round) and
  // handles it once complete. Returns true when the store changed.
  bool ReadAndHandle(Connection& c) {
    size_t budget = kReadBudgetPerRound;
    size_t wanted = FrameBytesWanted(c);
    while (wanted > 0 && budget > 0) {
      const size_t chunk = std::min({wanted, budget, read_buffer_.size()});
      const ssize_t n = ::recv(c.fd.get(), read_buffer_.data(), chunk, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        c.dead = true;  // Closed or reset: drop it and any pending wait.
        return false;
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        return false;  // Drained for now; the rest comes in a later round.
      }
      if (c.in.empty()) {
        c.frame_deadline = DeadlineIn(limits_.frame_timeout);
        TrackDeadline(c.frame_deadline);
      }
      c.in.append(read_buffer_.data(), static_cast<size_t>(n));
      budget -= static_cast<size_t>(n);
      if (c.in.size() == wire::kHeaderBytes && !AcceptHeader(c)) {
        ++stats_.dropped_bad_frame;
        c.dead = true;  // Garbage: drop the client, nothing else is affected.
        return false;
      }
      wanted = FrameBytesWanted(c);
    }
    if (wanted > 0) return false;
    absl::StatusOr<wire::Request> request =
        wire::ParseRequest(c.header.op, absl::string_view(c.in).substr(wire::kHeaderBytes));
    c.in.clear();
    ReleaseIfLarge(c.in);
    if (!request.ok()) {
      ++stats_.dropped_bad_frame;
      c.dead = true;
      return false;
    }
    return Handle(c, *std::move(request));
  }

  bool Handle(Connection& c, wire::Request r) {
    if (!c.hello) {
      // AcceptHeader let only HELLO through.
      if (r.value != token_) {
        Reply(c, Error(absl::PermissionDeniedError(
                     "TcpStore: wrong or missing token; set the same token (LOCKSTEP_STORE_TOKEN) "
                     "on every process of the job")));
        c.close_after_flush = true;
        return false;
      }
      c.hello = true;
      ++stats_.authenticated;
      Reply(c, Ok());
      return false;
    }
    switch (r.op) {
      case wire::Op::kSet:
        data_[r.keys[0]] = std::move(r.value);
        Reply(c, Ok());
        return Changed(r.keys[0]);
      case wire::Op::kGet:
      case wire::Op::kWait:
      case wire::Op::kMultiGet:
        // Saturates: a huge timeout (2^62 ms) parks the request "forever".
        c.pending_deadline = DeadlineIn(Milliseconds(r.integer));
        TrackDeadline(c.pending_deadline);
        c.pending = std::move(r);
        ++stats_.pending_waits;
        c.pending_serial = ++serial_;
        Park(c);
        return false;
      case wire::Op::kAdd: {
        absl::StatusOr<int64_t> v = store_ops::Add(data_, r.keys[0], r.integer);
        Reply(c, v.ok() ? Ok("", *v) : Error(v.status()));
        return v.ok() && Changed(r.keys[0]);
      }
      case wire::Op::kCompareSet:
        Reply(c, Ok(store_ops::CompareSet(data_, r.keys[0], r.value, r.desired)));
        return data_.count(r.keys[0]) > 0 && Changed(r.keys[0]);
      case wire::Op::kCheck:
        Reply(c, Ok("", store_ops::AllPresent(data_, r.keys) ? 1 : 0));
        return false;
      case wire::Op::kDelete: {
        const bool erased = data_.erase(r.keys[0]) > 0;
        Reply(c, Ok("", erased ? 1 : 0));
        return erased;
      }
      case wire::Op::kNumKeys:
        Reply(c, Ok("", static_cast<int64_t>(data_.size())));
        return false;
      case wire::Op::kHello:
      case wire::Op::kResponse:
        ++stats_.dropped_bad_frame;
        c.dead = true;  // Protocol violation.
        return false;
    }
    return false;
  }

  // A key was written: its waiters are woken after this round's reads.
  bool Changed(const std::string& key) {
    if (waiters_.count(key) > 0) changed_keys_.push_back(key);
    return !changed_keys_.empty();
  }

  // Counts the pending request's missing keys and waits on each of them
  // (waiters_), or answers it when none is missing. Each key's waiters are
  // visited once, when it appears: no work per round for parked requests.
  void Park(Connection& c) {
    c.missing = 0;
    for (const std::string& key : c.pending->keys) {
      if (data_.count(key) > 0) continue;
      ++c.missing;
      waiters_[key].push_back({&c, c.pending_serial});
    }
    if (c.missing == 0) Answer(c);
  }

  void Answer(Connection& c) {
    if (c.pending->op == wire::Op::kGet) {
      Reply(c, Ok(data_.find(c.pending->keys[0])->second));
    } else if (c.pending->op == wire::Op::kMultiGet) {
      // The size first, from the stored values in place: a request naming
      // one large key 65,536 times must cost nothing before it is refused.
      std::vector<const std::string*> values;
      values.reserve(c.pending->keys.size());
      size_t bytes = 0;
      for (const std::string& key : c.pending->keys) {
        values.push_back(&data_.find(key)->second);
        bytes += 4 + values.back()->size();
      }
      if (bytes > wire::kMaxValueBytes) {
        Reply(c, Error(absl::ResourceExhaustedError(absl::StrCat(
                     "TcpStore MULTI_GET: the ", c.pending->keys.size(), " values take ", bytes,
                     " bytes, more than a reply carries (", wire::kMaxValueBytes, "); ask for fewer keys at a time"))));
      } else {
        Reply(c, Ok(wire::PackValues(values)));
      }
    } else {
      Reply(c, Ok());
    }
    c.pending.reset();
    --stats_.pending_waits;
  }

  // Drops the parked request's entries (it timed out or its client went).
  void Unpark(Connection& c) {
    if (!c.pending) return;
    for (const std::string& key : c.pending->keys) {
      auto it = waiters_.find(key);
      if (it == waiters_.end()) continue;
      auto& list = it->second;
      list.erase(std::remove_if(list.begin(), list.end(), [&](const Waiter& w) { return w.connection == &c; }),
                 list.end());
      if (list.empty()) waiters_.erase(it);
    }
    c.pending.reset();
    --stats_.pending_waits;
  }

  void WakeWaiters() {
    std::vector<std::string> keys;
    keys.swap(changed_keys_);
    for (const std::string& key : keys) {
      auto it = waiters_.find(key);
      if (it == waiters_.end() || data_.count(key) == 0) continue;
      std::vector<Waiter> woken = std::move(it->second);
      waiters_.erase(it);
      for (const Waiter& w : woken) {
        Connection& c = *w.connection;
        if (c.dead || !c.pending || c.pending_serial != w.serial) continue;
        if (--c.missing > 0) continue;
        // A key counted present may have been deleted since: count again.
        if (store_ops::AllPresent(data_, c.pending->keys)) {
          Answer(c);
        } else {
          Park(c);
        }
      }
    }
  }

  // Runs when the earliest deadline TrackDeadline saw has come: acts on every
  // deadline that passed and finds the next one (a scan of all connections,
  // once per deadline reached, not per round).
  void ExpireDeadlines() {
    const Deadline now = SteadyClock::now();
    next_deadline_ = kNoDeadline;
    for (Connection& c : conns_) {
      if (c.dead) continue;
      if (c.pending && c.pending_deadline <= now) {
        Reply(c, Error(store_ops::WaitTimeout(data_, c.pending->keys, Milliseconds(c.pending->integer))));
        Unpark(c);
      }
      if (!c.hello && c.hello_deadline <= now) {
        ++stats_.dropped_hello_timeout;
        c.dead = true;
      } else if ((!c.in.empty() && c.frame_deadline <= now) || (c.out_pending() && c.out_deadline <= now)) {
        ++stats_.dropped_frame_timeout;
        c.dead = true;
      }
      if (c.dead) {
        Touch(c);
        continue;
      }
      if (c.pending) TrackDeadline(c.pending_deadline);
      if (!c.hello) TrackDeadline(c.hello_deadline);
      if (!c.in.empty()) TrackDeadline(c.frame_deadline);
      if (c.out_pending()) TrackDeadline(c.out_deadline);
    }
  }

  void Reply(Connection& c, const wire::Response& response) {
    // WantsInput makes the previous reply gone by now, so `out` holds one;
    // appending keeps this correct regardless.
    if (!c.out_pending()) {
      c.out.clear();
      c.out_offset = 0;
      c.out_deadline = DeadlineIn(limits_.frame_timeout);
    }
    c.out += wire::EncodeResponse(response);
    Touch(c);
    Flush(c);
    if (c.out_pending()) TrackDeadline(c.out_deadline);
  }

  void Flush(Connection& c) {
    while (c.out_pending()) {
      const ssize_t n =
          ::send(c.fd.get(), c.out.data() + c.out_offset, c.out.size() - c.out_offset, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out_offset += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
      c.dead = true;
      return;
    }
    c.out.clear();
    c.out_offset = 0;
    ReleaseIfLarge(c.out);
  }

  // The counters are kept as things happen (Account, Settle, Park...): no
  // scan of the connections.
  void PublishStats() {
    stats_.connections = static_cast<int64_t>(conns_.size());
    publish_(stats_);
  }

  const int listen_fd_;
  const int wake_fd_;
  const std::string token_;
  const TcpStoreLimits limits_;
  const Publish publish_;
  std::vector<char> read_buffer_;
  Deadline accept_resume_;  // The listener rests until then (EMFILE).
  Fd epoll_;
  bool listener_armed_ = true;
  // No deadline of any connection is earlier (ExpireDeadlines recomputes it).
  Deadline next_deadline_ = kNoDeadline;
  std::vector<Connection*> touched_;
  TcpStoreServerStats stats_;
  std::list<Connection> conns_;
  store_ops::HashMap data_;
  // Parked GET/WAIT requests by missing key (a std::list keeps Connection
  // addresses stable); `serial` tells a stale entry from the current request.
  struct Waiter {
    Connection* connection;
    uint64_t serial;
  };
  std::unordered_map<std::string, std::vector<Waiter>> waiters_;
  std::vector<std::string> changed_keys_;  // Written this round, with waiters.
  uint64_t serial_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(const TcpStoreServerOptions& options) {
  const TcpStoreLimits& limits = options.limits;
  if (limits.max_connections < 1 || limits.hello_timeout.count() <= 0 || limits.frame_timeout.count() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TcpStoreServer: limits must be positive, got max_connections=", limits.max_connections,
        " hello_timeout=", limits.hello_timeout.count(), " ms frame_timeout=", limits.frame_timeout.count(), " ms"));
  }
  if (options.token.size() > wire::kMaxTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat("TcpStoreServer: the token has ", options.token.size(),
                                                   " bytes, more than the limit of ", wire::kMaxTokenBytes,
                                                   "; use a shorter LOCKSTEP_STORE_TOKEN"));
  }
  std::unique_ptr<TcpStoreServer> server(new TcpStoreServer());
  LOCKSTEP_ASSIGN_OR_RETURN(server->listen_, Listen(options.host, options.port, &server->port_));
  LOCKSTEP_RETURN_IF_ERROR(SetNonBlocking(server->listen_.get()));
  server->wake_ = Fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!server->wake_.valid()) return absl::InternalError("TcpStoreServer: eventfd failed");
  server->token_ = options.token;
  server->limits_ = options.limits;
  server->thread_ = std::thread([s = server.get()] { s->Run(); });
  return server;
}

void TcpStoreServer::Run() {
  ServerLoop loop(listen_.get(), wake_.get(), token_, limits_, [this](const TcpStoreServerStats& s) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_ = s;
  });
  loop.Run();
}

TcpStoreServerStats TcpStoreServer::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

TcpStoreServer::~TcpStoreServer() {
  const uint64_t one = 1;
  if (::write(wake_.get(), &one, sizeof(one)) < 0) {
    // The eventfd cannot fail to accept one increment; nothing to do.
  }
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<std::unique_ptr<TcpStore>> TcpStore::Create(const TcpStoreOptions& options) {
  std::unique_ptr<TcpStore> store(new TcpStore());
  store->set_timeout(options.timeout);
  store->host_ = options.host;
  store->port_ = options.port;
  store->token_ = options.token;
  if (options.token.size() > wire::kMaxTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat("TcpStore: the token has ", options.token.size(),
                                                   " bytes, more than the limit of ", wire::kMaxTokenBytes,
                                                   "; use a shorter LOCKSTEP_STORE_TOKEN"));
  }
  if (options.is_server) {
    TcpStoreServerOptions server_options;
    // Every interface of the address family of `host` (IPv6's "::" also
    // takes IPv4 on Linux), as c10d's TCPStore; loopback stays loopback.
    const bool v6 = options.host.find(':') != std::string::npos;
    server_options.host = options.host == "127.0.0.1" || options.host == "localhost" || options.host == "::1"
                              ? options.host
                              : (v6 ? "::" : "0.0.0.0");
    server_options.port = options.port;
    server_options.token = options.token;
    server_options.limits = options.server_limits;
    LOCKSTEP_ASSIGN_OR_RETURN(store->server_, TcpStoreServer::Start(server_options));
    store->port_ = store->server_->port();
  } else if (options.port <= 0) {
    return absl::InvalidArgumentError("TcpStore: a client needs the server's port (options.port)");
  }
  {
    LOCKSTEP_ASSIGN_OR_RETURN(Fd first, store->TakeConnection(DeadlineIn(options.timeout)));
    store->ReturnConnection(std::move(first));
  }
  if (options.num_workers > 0) {
    LOCKSTEP_ASSIGN_OR_RETURN(int64_t arrived, store->Add(kWorkersKey, 1));
    if (arrived == options.num_workers) LOCKSTEP_RETURN_IF_ERROR(store->Set(kWorkersDoneKey, "1"));
    if (options.is_server && options.wait_for_workers) {
      absl::Status s = store->Wait({kWorkersDoneKey}, options.timeout);
      if (!s.ok()) {
        absl::StatusOr<std::string> count = store->Get(kWorkersKey, Milliseconds(0));
        return absl::DeadlineExceededError(absl::StrCat("TcpStore: only ", count.ok() ? *count : "?", " of ",
                                                        options.num_workers, " workers connected to port ",
                                                        store->port_, " within ", options.timeout.count(),
                                                        " ms; check that every process points at this host and port"));
      }
    }
  }
  return store;
}

absl::StatusOr<Fd> TcpStore::TakeConnection(Deadline deadline) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      Fd fd = std::move(idle_.back());
      idle_.pop_back();
      return fd;
    }
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Fd fd, Connect(host_, port_, deadline, "the store server"));
  TuneSocket(fd.get(), 0);
  wire::Request hello;
  hello.op = wire::Op::kHello;
  hello.value = token_;
  const std::string frame = wire::EncodeRequest(hello);
  const std::string peer = absl::StrCat("store server ", HostPort(host_, port_));
  LOCKSTEP_RETURN_IF_ERROR(SendAll(fd.get(), frame.data(), frame.size(), deadline, peer));
  char header[wire::kHeaderBytes];
  LOCKSTEP_RETURN_IF_ERROR(RecvAll(fd.get(), header, sizeof(header), deadline, peer));
  LOCKSTEP_ASSIGN_OR_RETURN(wire::FrameHeader h, wire::ParseHeader(absl::string_view(header, sizeof(header))));
  std::string body(h.body_bytes, '\0');
  LOCKSTEP_RETURN_IF_ERROR(RecvAll(fd.get(), body.data(), body.size(), deadline, peer));
  LOCKSTEP_ASSIGN_OR_RETURN(wire::Response r, wire::ParseResponse(body));
  if (r.code != absl::StatusCode::kOk) return absl::Status(r.code, r.value);
  return fd;
}

void TcpStore::ReturnConnection(Fd fd) {
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() < 8) idle_.push_back(std::move(fd));
}

absl::StatusOr<wire::Response> TcpStore::Call(const wire::Request& request, Milliseconds wait) {
  // The server answers a wait itself at its deadline; allow it time to.
  const Deadline deadline = DeadlineIn(SaturatingAdd(std::max(wait, Milliseconds(0)), timeout()));
  LOCKSTEP_ASSIGN_OR_RETURN(Fd fd, TakeConnection(DeadlineIn(timeout())));
  const std::string peer = absl::StrCat("store server ", HostPort(host_, port_));
  const std::string frame = wire::EncodeRequest(request);
  absl::Status s = SendAll(fd.get(), frame.data(), frame.size(), deadline, peer);
  char header[wire::kHeaderBytes];
  if (s.ok()) s = RecvAll(fd.get(), header, sizeof(header), deadline, peer);
  absl::StatusOr<wire::FrameHeader> h =
      s.ok() ? wire::ParseHeader(absl::string_view(header, sizeof(header))) : absl::StatusOr<wire::FrameHeader>(s);
  std::string body;
  if (h.ok()) {
    body.resize(h->body_bytes);
    s = RecvAll(fd.get(), body.data(), body.size(), deadline, peer);
  } else {
    s = h.status();
  }
  absl::StatusOr<wire::Response> r = s.ok() ? wire::ParseResponse(body) : absl::StatusOr<wire::Response>(s);
  if (!r.ok()) {
    // The connection is out of step: drop it (fd closes here).
    return absl::Status(r.status().code(),
                        absl::StrCat("TcpStore ", wire::OpName(request.op), ": ", r.status().message()));
  }
  ReturnConnection(std::move(fd));
  if (r->code != absl::StatusCode::kOk) return absl::Status(r->code, r->value);
  return r;
}

absl::Status TcpStore::Set(absl::string_view key, absl::string_view value) {
  wire::Request r;
  r.op = wire::Op::kSet;
  r.keys = {std::string(key)};
  r.value = std::string(value);
  return Call(r, Milliseconds(0)).status();
}

absl::StatusOr<std::string> TcpStore::Get(absl::string_view key, Milliseconds timeout) {
  wire::Request r;
  r.op = wire::Op::kGet;
  r.keys = {std::string(key)};
  r.integer = timeout.count();
  LOCKSTEP_ASSIGN_OR_RETURN(wire::Response response, Call(r, timeout));
  return std::move(response.value);
}

absl::StatusOr<int64_t> TcpStore::Add(absl::string_view key, int64_t delta) {
  wire::Request r;
  r.op = wire::Op::kAdd;
  r.keys = {std::string(key)};
  r.integer = delta;
  LOCKSTEP_ASSIGN_OR_RETURN(wire::Response response, Call(r, Milliseconds(0)));
  return response.integer;
}

absl::StatusOr<std::string> TcpStore::CompareSet(absl::string_view key, absl::string_view expected,
                                                 absl::string_view desired) {
  wire::Request r;
  r.op = wire::Op::kCompareSet;
  r.keys = {std::string(key)};
  r.value = std::string(expected);
  r.desired = std::string(desired);
  LOCKSTEP_ASSIGN_OR_RETURN(wire::Response response, Call(r, Milliseconds(0)));
  return std::move(response.value);
}

absl::Status TcpStore::Wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  wire::Request r;
  r.op = wire::Op::kWait;
  r.keys = keys;
  r.integer = timeout.count();
  return Call(r, timeout).status();
}

absl::StatusOr<std::vector<std::string>> TcpStore::MultiGet(const std::vector<std::string>& keys,
                                                            Milliseconds timeout) {
  // In requests of at most kMultiGetKeysPerRequest keys, each waiting for
  // its own keys: once the last answers, every key has existed, as one
  // request would say; the server's memory per client stays bounded.
  if (keys.empty()) return std::vector<std::string>();
  const Deadline deadline = DeadlineIn(timeout);
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (size_t begin = 0; begin < keys.size(); begin += wire::kMultiGetKeysPerRequest) {
    const size_t end = std::min(keys.size(), begin + wire::kMultiGetKeysPerRequest);
    wire::Request r;
    r.op = wire::Op::kMultiGet;
    r.keys.assign(keys.begin() + static_cast<std::ptrdiff_t>(begin), keys.begin() + static_cast<std::ptrdiff_t>(end));
    // The first request's wait gets the whole timeout; later ones what is left.
    const Milliseconds left =
        begin == 0 ? timeout
                   : std::max(Milliseconds(0), std::chrono::ceil<Milliseconds>(deadline - SteadyClock::now()));
    r.integer = left.count();
    LOCKSTEP_ASSIGN_OR_RETURN(wire::Response response, Call(r, left));
    LOCKSTEP_ASSIGN_OR_RETURN(std::vector<std::string> part, wire::UnpackValues(response.value, end - begin));
    for (std::string& v : part) values.push_back(std::move(v));
  }
  return values;
}

absl::StatusOr<bool> TcpStore::Check(const std::vector<std::string>& keys) {
  wire::Request r;
  r.op = wire::Op::kCheck;
  r.keys = keys;
  LOCKSTEP_ASSIGN_OR_RETURN(wire::Response response, Call(r, Milliseconds(0)));
  return response.integer != 0;
}

absl::StatusOr<bool> TcpStore::DeleteKey(absl::string_view key) {
  wire::Request r;
  r.op = wire::Op::kDelete;
  r.keys = {std::string(key)};
  LOCKSTEP_ASSIGN_OR_RETURN(wire::Response response, Call(r, Milliseconds(0)));
  return response.integer != 0;
}

absl::StatusOr<int64_t> TcpStore::NumKeys() {
  wire::Request r;
  r.op = wire::Op::kNumKeys;
  LOCKSTEP_ASSIGN_OR_RETURN(wire::Response response, Call(r, Milliseconds(0)));
  return response.integer;
}

}  // namespace lockstep
