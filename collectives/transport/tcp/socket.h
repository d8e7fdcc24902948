// Thin RAII and deadline-aware helpers over POSIX TCP sockets, shared by the
// store and the transports. Every blocking helper takes a deadline and polls,
// so nothing here can hang past it.
#ifndef LOCKSTEP_COLLECTIVES_TRANSPORT_TCP_SOCKET_H_
#define LOCKSTEP_COLLECTIVES_TRANSPORT_TCP_SOCKET_H_

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/deadline.h"
#include "core/fd.h"

namespace lockstep {

// Deadline, kNoDeadline, DeadlineIn, PollTimeoutMs (core/deadline.h) and Fd
// (core/fd.h) are what every helper below takes and returns.

// "host:port" (IPv6 hosts in brackets).
std::string HostPort(absl::string_view host, int port);

// Splits "host:port" or "[v6]:port".
absl::Status SplitHostPort(absl::string_view text, std::string* host, int* port);

// A listening socket on host:port (port 0 picks a free one, returned in
// *bound_port). host "" or "0.0.0.0" listens on every IPv4 interface.
absl::StatusOr<Fd> Listen(const std::string& host, int port, int* bound_port);

// Connects to host:port, retrying refused/unreachable connections until the
// deadline (the listener may start later). `what` names the peer in errors.
absl::StatusOr<Fd> Connect(const std::string& host, int port, Deadline deadline, absl::string_view what);

// One non-blocking connection attempt that waits at most until `until`:
// the socket, or Unavailable with *error set to the attempt's errno
// (ETIMEDOUT when `until` passed); InvalidArgument when `host` does not
// resolve.
absl::StatusOr<Fd> ConnectOnce(const std::string& host, int port, Deadline until, int* error);

// Accepts one connection before the deadline.
absl::StatusOr<Fd> Accept(int listen_fd, Deadline deadline, absl::string_view what);

// Blocking-until-deadline full send/receive on a (non-blocking or blocking)
// socket. A closed connection, a reset or the deadline is an error naming
// `peer`.
absl::Status SendAll(int fd, const void* data, size_t bytes, Deadline deadline, absl::string_view peer);
absl::Status RecvAll(int fd, void* data, size_t bytes, Deadline deadline, absl::string_view peer);

absl::Status SetNonBlocking(int fd);
// TCP_NODELAY, fixed send/receive buffers (buffer_bytes > 0) and a congestion
// control algorithm (non-empty; best effort).
void TuneSocket(int fd, int buffer_bytes, const std::string& congestion_control = "");

// The local address of a connected or listening socket ("ip:port").
std::string LocalAddress(int fd);
// The other end's address of a connected socket ("ip:port", "?" if unknown).
std::string PeerAddress(int fd);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_TRANSPORT_TCP_SOCKET_H_
