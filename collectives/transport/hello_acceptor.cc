#include "collectives/transport/hello_acceptor.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace lockstep {

void TakePassedFds(msghdr& msg, size_t max, std::vector<Fd>* out) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t k = 0; k < count; ++k) {
      int received;
      std::memcpy(&received, CMSG_DATA(c) + k * sizeof(int), sizeof(int));
      Fd owned(received);  // Closed unless kept.
      if (out->size() < max) out->push_back(std::move(owned));
    }
  }
}

HelloAcceptor::HelloAcceptor(int listen_fd, HelloAcceptorOptions options, HelloSize hello_size)
    : listen_fd_(listen_fd), options_(std::move(options)), hello_size_(std::move(hello_size)) {}

void HelloAcceptor::Drop(Arrival& arrival, absl::string_view why) {
  std::fprintf(stderr, "%s dropped %s: %s\n", options_.listener_name.c_str(), arrival.name.c_str(),
               std::string(why).c_str());
  ++dropped_;
  last_drop_ = absl::StrCat(arrival.name, ": ", why);
  arrival.fd.Reset();
  arrival.fds.clear();
}

void HelloAcceptor::DropPending(Pending& p, absl::string_view why) {
  Arrival a{std::move(p.fd), "", std::move(p.fds), std::move(p.name)};
  Drop(a, why);
}

void HelloAcceptor::AcceptAll() {
  while (true) {
    Fd fd(::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd.valid()) return;  // EAGAIN (none left), or an aborted connection.
    Pending p;
    p.name = options_.describe ? options_.describe(fd.get()) : "a connection";
    p.fd = std::move(fd);
    p.deadline = DeadlineIn(options_.per_connection);
    p.wanted = hello_size_("");
    if (options_.admit) {
      if (absl::Status s = options_.admit(p.fd.get()); !s.ok()) {
        DropPending(p, s.message());
        continue;
      }
    }
    if (pending_.size() >= options_.max_pending) {
      DropPending(pending_.front(), absl::StrCat("evicted: ", options_.max_pending,
                                                 " connections were waiting for their handshake at once"));
      pending_.pop_front();
    }
    pending_.push_back(std::move(p));
  }
}

absl::StatusOr<bool> HelloAcceptor::ReadSome(Pending& p) {
  while (p.hello.size() < p.wanted) {
    char buffer[512];
    const size_t want = std::min(sizeof(buffer), p.wanted - p.hello.size());
    iovec iov{buffer, want};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(8 * sizeof(int))];
    if (options_.max_fds > 0) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
    }
    const ssize_t n = ::recvmsg(p.fd.get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      return absl::UnavailableError(absl::StrCat("reading its handshake: ", std::strerror(errno)));
    }
    if (n == 0) {
      return absl::UnavailableError(
          absl::StrCat("it closed the connection after ", p.hello.size(), " of ", p.wanted, " handshake bytes"));
    }
    if (options_.max_fds > 0) TakePassedFds(msg, options_.max_fds, &p.fds);
    p.hello.append(buffer, static_cast<size_t>(n));
    if (p.hello.size() == p.wanted) p.wanted = std::max(p.hello.size(), hello_size_(p.hello));
  }
  return true;
}

std::optional<HelloAcceptor::Arrival> HelloAcceptor::Scan() {
  const Deadline now = SteadyClock::now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    absl::StatusOr<bool> done = ReadSome(*it);
    if (done.ok() && *done) {
      Arrival a{std::move(it->fd), std::move(it->hello), std::move(it->fds), std::move(it->name)};
      pending_.erase(it);
      return a;
    }
    if (!done.ok() || now >= it->deadline) {
      DropPending(*it, done.ok() ? absl::StrCat("sent ", it->hello.size(), " of ", it->wanted,
                                                " handshake bytes within ", options_.per_connection.count(), " ms")
                                 : done.status().message());
      it = pending_.erase(it);
      continue;
    }
    ++it;
  }
  return std::nullopt;
}

std::optional<HelloAcceptor::Arrival> HelloAcceptor::TryNext() {
  AcceptAll();
  return Scan();
}

void HelloAcceptor::AppendPollFds(std::vector<int>* fds, Deadline* expiry) const {
  fds->push_back(listen_fd_);
  for (const Pending& p : pending_) {
    fds->push_back(p.fd.get());
    *expiry = std::min(*expiry, p.deadline);
  }
}

absl::StatusOr<HelloAcceptor::Arrival> HelloAcceptor::Next(Deadline deadline) {
  std::vector<pollfd> fds;
  while (true) {
    // Hellos that are complete, expired ones dropped.
    if (std::optional<Arrival> a = Scan()) return std::move(*a);
    if (SteadyClock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "timed out waiting for the other ranks to connect to ", options_.listener_name,
          dropped_ == 0 ? std::string()
                        : absl::StrCat(" (", dropped_, " connections dropped; the last: ", last_drop_, ")")));
    }
    Deadline wake = deadline;
    fds.clear();
    fds.push_back(pollfd{listen_fd_, POLLIN, 0});
    for (const Pending& p : pending_) {
      fds.push_back(pollfd{p.fd.get(), POLLIN, 0});
      wake = std::min(wake, p.deadline);
    }
    const int rc = ::poll(fds.data(), fds.size(), PollTimeoutMs(wake));
    if (rc < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat(options_.listener_name, ": poll: ", std::strerror(errno)));
    }
    if (rc > 0 && fds[0].revents != 0) AcceptAll();
  }
}

}  // namespace lockstep
