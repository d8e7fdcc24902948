#include "collectives/tcp_store.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <list>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "collectives/store_ops.h"
#include "core/status.h"

namespace lockstep {
namespace {

namespace wire = store_wire;

constexpr char kWorkersKey[] = "__lockstep/store_workers";
constexpr char kWorkersDoneKey[] = "__lockstep/store_workers_done";

// One client connection on the server side.
struct Connection {
  Fd fd;
  std::string in;       // Bytes received, not yet consumed.
  std::string out;      // Bytes to send.
  size_t out_offset = 0;
  bool hello = false;   // HELLO accepted.
  bool close_after_flush = false;
  bool dead = false;
  std::optional<wire::Request> pending;  // A GET/WAIT waiting for keys.
  Deadline pending_deadline;
};

wire::Response Ok(std::string value = "", int64_t integer = 0) {
  return wire::Response{absl::StatusCode::kOk, std::move(value), integer};
}

wire::Response Error(const absl::Status& s) {
  return wire::Response{s.code(), std::string(s.message()), 0};
}

// The server's state and request handling, owned by its thread.
class ServerLoop {
 public:
  ServerLoop(int listen_fd, int wake_fd, std::string token)
      : listen_fd_(listen_fd), wake_fd_(wake_fd), token_(std::move(token)) {}

  void Run() {
    std::vector<pollfd> fds;
    while (true) {
      fds.clear();
      fds.push_back({wake_fd_, POLLIN, 0});
      fds.push_back({listen_fd_, POLLIN, 0});
      for (Connection& c : conns_) {
        short events = POLLIN;
        if (c.out_offset < c.out.size()) events |= POLLOUT;
        fds.push_back({c.fd.get(), events, 0});
      }
      const int rc = ::poll(fds.data(), fds.size(), NextTimeoutMs());
      if (rc < 0 && errno != EINTR) return;
      if (fds[0].revents & POLLIN) return;  // Stop requested.
      if (fds[1].revents & POLLIN) AcceptAll();
      size_t i = 2;
      bool changed = false;
      for (Connection& c : conns_) {
        if (i >= fds.size()) break;  // Accepted this round; polled next round.
        const short revents = fds[i++].revents;
        if (revents & (POLLIN | POLLHUP | POLLERR)) changed |= ReadAndHandle(c);
        if (!c.dead && (revents & POLLOUT)) Flush(c);
      }
      if (changed) WakeWaiters();
      ExpireWaiters();
      conns_.remove_if([](const Connection& c) {
        return c.dead || (c.close_after_flush && c.out_offset >= c.out.size());
      });
    }
  }

 private:
  int NextTimeoutMs() const {
    std::optional<Deadline> earliest;
    for (const Connection& c : conns_) {
      if (c.pending && (!earliest || c.pending_deadline < *earliest)) earliest = c.pending_deadline;
    }
    return earliest ? PollTimeoutMs(*earliest) : -1;
  }

  void AcceptAll() {
    while (true) {
      Fd fd(::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!fd.valid()) return;
      TuneSocket(fd.get(), 0);
      conns_.emplace_back();
      conns_.back().fd = std::move(fd);
    }
  }

  // Returns true when the store changed.
  bool ReadAndHandle(Connection& c) {
    char buffer[65536];
    while (true) {
      const ssize_t n = ::recv(c.fd.get(), buffer, sizeof(buffer), MSG_DONTWAIT);
      if (n > 0) {
        c.in.append(buffer, static_cast<size_t>(n));
        if (c.in.size() > wire::kHeaderBytes + wire::kMaxBodyBytes) {
          // More than one maximal frame buffered: only possible for a client
          // that pipelines requests behind a pending wait. Not allowed.
          if (c.pending || c.in.size() > 2 * (wire::kHeaderBytes + wire::kMaxBodyBytes)) {
            c.dead = true;
            return false;
          }
          break;
        }
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        c.dead = true;  // Closed or reset: drop it and any pending wait.
        return false;
      }
      break;
    }
    return HandleFrames(c);
  }

  bool HandleFrames(Connection& c) {
    bool changed = false;
    while (!c.dead && !c.close_after_flush && !c.pending && c.in.size() >= wire::kHeaderBytes) {
      absl::StatusOr<wire::FrameHeader> header = wire::ParseHeader(absl::string_view(c.in).substr(0, wire::kHeaderBytes));
      if (!header.ok()) {
        c.dead = true;  // Garbage: drop the client, nothing else is affected.
        return changed;
      }
      if (c.in.size() < wire::kHeaderBytes + header->body_bytes) break;  // Wait for the rest.
      absl::StatusOr<wire::Request> request =
          wire::ParseRequest(header->op, absl::string_view(c.in).substr(wire::kHeaderBytes, header->body_bytes));
      c.in.erase(0, wire::kHeaderBytes + header->body_bytes);
      if (!request.ok()) {
        c.dead = true;
        return changed;
      }
      changed |= Handle(c, *std::move(request));
    }
    return changed;
  }

  bool Handle(Connection& c, wire::Request r) {
    if (!c.hello) {
      if (r.op != wire::Op::kHello) {
        c.dead = true;
        return false;
      }
      if (r.value != token_) {
        Reply(c, Error(absl::PermissionDeniedError(
                     "TcpStore: wrong or missing token; set the same token (LOCKSTEP_STORE_TOKEN) "
                     "on every process of the job")));
        c.close_after_flush = true;
        return false;
      }
      c.hello = true;
      Reply(c, Ok());
      return false;
    }
    switch (r.op) {
      case wire::Op::kSet:
        data_[r.keys[0]] = std::move(r.value);
        Reply(c, Ok());
        return true;
      case wire::Op::kGet:
      case wire::Op::kWait:
        c.pending_deadline = DeadlineIn(Milliseconds(r.integer));
        c.pending = std::move(r);
        TryComplete(c);
        return false;
      case wire::Op::kAdd: {
        absl::StatusOr<int64_t> v = store_ops::Add(data_, r.keys[0], r.integer);
        Reply(c, v.ok() ? Ok("", *v) : Error(v.status()));
        return v.ok();
      }
      case wire::Op::kCompareSet:
        Reply(c, Ok(store_ops::CompareSet(data_, r.keys[0], r.value, r.desired)));
        return true;
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
        c.dead = true;  // Protocol violation.
        return false;
    }
    return false;
  }

  // Answers a pending GET/WAIT if its keys are all present.
  void TryComplete(Connection& c) {
    if (!c.pending || !store_ops::AllPresent(data_, c.pending->keys)) return;
    if (c.pending->op == wire::Op::kGet) {
      Reply(c, Ok(data_.find(c.pending->keys[0])->second));
    } else {
      Reply(c, Ok());
    }
    c.pending.reset();
    HandleFrames(c);  // Requests that arrived meanwhile.
  }

  void WakeWaiters() {
    for (Connection& c : conns_) {
      if (!c.dead) TryComplete(c);
    }
  }

  void ExpireWaiters() {
    const Deadline now = SteadyClock::now();
    for (Connection& c : conns_) {
      if (c.pending && !c.dead && c.pending_deadline <= now) {
        Reply(c, Error(store_ops::WaitTimeout(data_, c.pending->keys, Milliseconds(c.pending->integer))));
        c.pending.reset();
        HandleFrames(c);
      }
    }
  }

  void Reply(Connection& c, const wire::Response& response) {
    if (c.out_offset == c.out.size()) {
      c.out.clear();
      c.out_offset = 0;
    }
    c.out += wire::EncodeResponse(response);
    Flush(c);
  }

  void Flush(Connection& c) {
    while (c.out_offset < c.out.size()) {
      const ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_offset, c.out.size() - c.out_offset,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out_offset += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
      c.dead = true;
      return;
    }
  }

  const int listen_fd_;
  const int wake_fd_;
  const std::string token_;
  std::list<Connection> conns_;
  store_ops::Map data_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(const TcpStoreServerOptions& options) {
  std::unique_ptr<TcpStoreServer> server(new TcpStoreServer());
  LOCKSTEP_ASSIGN_OR_RETURN(server->listen_, Listen(options.host, options.port, &server->port_));
  LOCKSTEP_RETURN_IF_ERROR(SetNonBlocking(server->listen_.get()));
  server->wake_ = Fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!server->wake_.valid()) return absl::InternalError("TcpStoreServer: eventfd failed");
  server->token_ = options.token;
  server->thread_ = std::thread([s = server.get()] { s->Run(); });
  return server;
}

void TcpStoreServer::Run() {
  ServerLoop loop(listen_.get(), wake_.get(), token_);
  loop.Run();
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
  if (options.is_server) {
    TcpStoreServerOptions server_options;
    server_options.host = options.host == "127.0.0.1" || options.host == "localhost" ? options.host : "0.0.0.0";
    server_options.port = options.port;
    server_options.token = options.token;
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
        return absl::DeadlineExceededError(absl::StrCat(
            "TcpStore: only ", count.ok() ? *count : "?", " of ", options.num_workers,
            " workers connected to port ", store->port_, " within ", options.timeout.count(),
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
  const Deadline deadline = DeadlineIn(std::max(wait, Milliseconds(0)) + timeout());
  LOCKSTEP_ASSIGN_OR_RETURN(Fd fd, TakeConnection(DeadlineIn(timeout())));
  const std::string peer = absl::StrCat("store server ", HostPort(host_, port_));
  const std::string frame = wire::EncodeRequest(request);
  absl::Status s = SendAll(fd.get(), frame.data(), frame.size(), deadline, peer);
  char header[wire::kHeaderBytes];
  if (s.ok()) s = RecvAll(fd.get(), header, sizeof(header), deadline, peer);
  absl::StatusOr<wire::FrameHeader> h = s.ok() ? wire::ParseHeader(absl::string_view(header, sizeof(header)))
                                               : absl::StatusOr<wire::FrameHeader>(s);
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
    return absl::Status(r.status().code(), absl::StrCat("TcpStore ", wire::OpName(request.op), ": ",
                                                        r.status().message()));
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
