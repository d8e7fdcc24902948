#include "collectives/transport/tcp/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace lockstep {

std::string HostPort(absl::string_view host, int port) {
  if (host.find(':') != absl::string_view::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::Status SplitHostPort(absl::string_view text, std::string* host, int* port) {
  const size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not host:port"));
  }
  absl::string_view h = text.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  int p = 0;
  if (!absl::SimpleAtoi(text.substr(colon + 1), &p) || p < 0 || p > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "': bad port"));
  }
  *host = std::string(h);
  *port = p;
  return absl::OkStatus();
}

namespace {

absl::Status Errno(absl::string_view what) {
  const int e = errno;
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(e)));
}

absl::StatusOr<addrinfo*> Resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* result = nullptr;
  const std::string service = absl::StrCat(port);
  const char* node = (passive && (host.empty() || host == "0.0.0.0")) ? nullptr : host.c_str();
  if (node == nullptr) hints.ai_family = AF_INET;
  const int rc = getaddrinfo(node, service.c_str(), &hints, &result);
  if (rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve host '", host, "': ", gai_strerror(rc)));
  }
  return result;
}

}  // namespace

absl::StatusOr<Fd> Listen(const std::string& host, int port, int* bound_port) {
  absl::StatusOr<addrinfo*> resolved = Resolve(host, port, /*passive=*/true);
  if (!resolved.ok()) return resolved.status();
  absl::Status last = absl::UnavailableError("no address");
  for (addrinfo* ai = *resolved; ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd.valid()) {
      last = Errno("socket");
      continue;
    }
    const int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      last = Errno(absl::StrCat("bind ", HostPort(host, port)));
      continue;
    }
    if (::listen(fd.get(), 1024) != 0) {
      last = Errno("listen");
      continue;
    }
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
    *bound_port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                             : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    freeaddrinfo(*resolved);
    return fd;
  }
  freeaddrinfo(*resolved);
  return last;
}

absl::StatusOr<Fd> ConnectOnce(const std::string& host, int port, Deadline until, int* error) {
  absl::StatusOr<addrinfo*> resolved = Resolve(host, port, /*passive=*/false);
  if (!resolved.ok()) return resolved.status();
  *error = ETIMEDOUT;
  for (addrinfo* ai = *resolved; ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!fd.valid()) {
      *error = errno;
      continue;
    }
    int rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      rc = ::poll(&p, 1, PollTimeoutMs(until));
      if (rc == 1) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        errno = err;
        rc = err == 0 ? 0 : -1;
      } else {
        errno = ETIMEDOUT;
        rc = -1;
      }
    }
    if (rc == 0) {
      freeaddrinfo(*resolved);
      return fd;
    }
    *error = errno;
  }
  freeaddrinfo(*resolved);
  return absl::UnavailableError(std::strerror(*error));
}

absl::StatusOr<Fd> Connect(const std::string& host, int port, Deadline deadline, absl::string_view what) {
  int error = 0;
  auto backoff = std::chrono::milliseconds(1);
  while (true) {
    absl::StatusOr<Fd> fd = ConnectOnce(host, port, deadline, &error);
    if (fd.ok() || absl::IsInvalidArgument(fd.status())) return fd;
    if (SteadyClock::now() >= deadline) break;
    // The peer may not listen yet: back off a little and retry.
    std::this_thread::sleep_for(std::min<Deadline::duration>(backoff, deadline - SteadyClock::now()));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
  return absl::DeadlineExceededError(absl::StrCat("could not connect to ", what, " at ", HostPort(host, port),
                                                  " before the timeout (last error: connect to ", what, " at ",
                                                  HostPort(host, port), ": ", std::strerror(error),
                                                  "). Is it running, and is the address reachable from this host?"));
}

absl::StatusOr<Fd> Accept(int listen_fd, Deadline deadline, absl::string_view what) {
  while (true) {
    pollfd p{listen_fd, POLLIN, 0};
    const int rc = ::poll(&p, 1, PollTimeoutMs(deadline));
    if (rc < 0 && errno != EINTR) return Errno("poll");
    if (rc > 0) {
      Fd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (fd.valid()) return fd;
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) return Errno("accept");
    }
    if (SteadyClock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("timed out waiting for ", what, " to connect"));
    }
  }
}

absl::Status SendAll(int fd, const void* data, size_t bytes, Deadline deadline, absl::string_view peer) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return Errno(absl::StrCat("send to ", peer));
    }
    pollfd pf{fd, POLLOUT, 0};
    const int rc = ::poll(&pf, 1, PollTimeoutMs(deadline));
    if (rc == 0 && SteadyClock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("timed out sending to ", peer));
    }
  }
  return absl::OkStatus();
}

absl::Status RecvAll(int fd, void* data, size_t bytes, Deadline deadline, absl::string_view peer) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::recv(fd, p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      return absl::UnavailableError(absl::StrCat(peer, " closed the connection"));
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return Errno(absl::StrCat("receive from ", peer));
    }
    pollfd pf{fd, POLLIN, 0};
    const int rc = ::poll(&pf, 1, PollTimeoutMs(deadline));
    if (rc == 0 && SteadyClock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("timed out receiving from ", peer));
    }
  }
  return absl::OkStatus();
}

absl::Status SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return Errno("fcntl");
  return absl::OkStatus();
}

void TuneSocket(int fd, int buffer_bytes, const std::string& congestion_control) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (!congestion_control.empty()) {
    // Best effort: an algorithm the kernel lacks or forbids keeps the default.
    setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, congestion_control.data(),
               static_cast<socklen_t>(congestion_control.size()));
  }
  if (buffer_bytes > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof(buffer_bytes));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof(buffer_bytes));
  }
}

namespace {

// "ip:port" of a socket address, "?" when unknown.
std::string AddressOf(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = {0};
  int port = 0;
  if (addr.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  } else {
    auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  }
  return HostPort(host, port);
}

}  // namespace

std::string LocalAddress(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  return AddressOf(addr);
}

std::string PeerAddress(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  return AddressOf(addr);
}

}  // namespace lockstep
