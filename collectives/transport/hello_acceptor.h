// HelloAcceptor: the accepting side of a transport's set-up. It accepts
// connections on a listening socket and reads each one's first message (its
// hello) concurrently, each under its own deadline, and hands over only
// connections whose hello came complete. Internal to the transports.
//
//   HelloAcceptor acceptor(listener.get(), options, [](absl::string_view got) {
//     return got.size() < 16 ? 16 : 64;  // total bytes wanted so far
//   });
//   while (accepted < expected) {
//     LOCKSTEP_ASSIGN_OR_RETURN(HelloAcceptor::Arrival a, acceptor.Next(deadline));
//     if (!Verify(a.hello)) { acceptor.Drop(a, "wrong MAC"); continue; }
//     ...
//   }
//
// Why: a set-up that accepts one connection and then waits on its hello lets
// any process that can reach the listener (a port on loopback, an abstract
// Unix socket listed in /proc/net/unix) stall the group by connecting and
// saying nothing, K connections for K handshake timeouts. Here strangers wait
// side by side with the real peers, and a real peer's hello, sent right after
// its connect, is read as soon as it arrives: idle or slow connections cost
// the real ranks nothing, and are dropped (and logged) at their own deadline.
#ifndef LOCKSTEP_COLLECTIVES_TRANSPORT_HELLO_ACCEPTOR_H_
#define LOCKSTEP_COLLECTIVES_TRANSPORT_HELLO_ACCEPTOR_H_

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/deadline.h"
#include "core/fd.h"

namespace lockstep {

struct HelloAcceptorOptions {
  // How long one connection may take to send its whole hello.
  std::chrono::milliseconds per_connection = std::chrono::milliseconds(5000);
  // Connections read at once; when more come, the oldest pending one is
  // dropped (a real peer's hello follows its connect at once, so a flood of
  // idle connections evicts only itself).
  size_t max_pending = 64;
  // Unix sockets: descriptors passed with the hello (SCM_RIGHTS), at most
  // this many kept (the rest are closed).
  size_t max_fds = 0;
  // Names the listener in logs and errors ("rank 3 (127.0.0.1:4000)").
  std::string listener_name;
  // Checked right after accept, before anything is read (SO_PEERCRED):
  // an error drops the connection with that reason.
  std::function<absl::Status(int fd)> admit;
  // Names a connection in logs ("a connection from 127.0.0.1:51000").
  std::function<std::string(int fd)> describe;
};

// Takes the descriptors passed with a received `msg` (SCM_RIGHTS): the
// first of them, until `out` holds `max`, are appended; the rest are closed.
void TakePassedFds(msghdr& msg, size_t max, std::vector<Fd>* out);

class HelloAcceptor {
 public:
  // `hello_size(got)`: the total bytes the hello needs, given the bytes that
  // came so far (called first with none). Returning got.size() completes it.
  using HelloSize = std::function<size_t(absl::string_view got)>;

  struct Arrival {
    Fd fd;
    std::string hello;
    std::vector<Fd> fds;
    std::string name;  // describe(fd), for the caller's messages.
  };

  // `listen_fd` must be non-blocking; not owned.
  HelloAcceptor(int listen_fd, HelloAcceptorOptions options, HelloSize hello_size);

  // The next connection whose hello is complete. DeadlineExceeded once
  // `deadline` passes first (naming how many connections were dropped and
  // why the last one was, which tells a wrong token from a missing rank).
  absl::StatusOr<Arrival> Next(Deadline deadline);

  // Never blocks: accepts what the listener has, reads what the pending
  // connections sent, drops the expired ones, and returns a connection
  // whose hello is complete, if any. For a caller that waits in its own
  // poll() (AppendPollFds) beside other sockets.
  std::optional<Arrival> TryNext();
  // The descriptors TryNext reads (the listener first): wait for POLLIN on
  // them. The earliest pending connection's deadline is *expiry (left as
  // it is when none is pending).
  void AppendPollFds(std::vector<int>* fds, Deadline* expiry) const;

  // Logs that `arrival` was refused and why, and closes it.
  void Drop(Arrival& arrival, absl::string_view why);

  int dropped() const { return dropped_; }
  // "<connection>: <why>" of the last one dropped; empty when none was.
  const std::string& last_drop() const { return last_drop_; }

 private:
  struct Pending {
    Fd fd;
    std::string name;
    std::string hello;
    size_t wanted = 0;
    std::vector<Fd> fds;
    Deadline deadline;
  };
  void AcceptAll();
  // One pass over the pending connections: the first complete one, if any;
  // the expired and failed ones dropped.
  std::optional<Arrival> Scan();
  // Reads what `p` has; true once its hello is complete, false to keep it
  // waiting; an error means drop it.
  absl::StatusOr<bool> ReadSome(Pending& p);
  void DropPending(Pending& p, absl::string_view why);

  const int listen_fd_;
  const HelloAcceptorOptions options_;
  const HelloSize hello_size_;
  std::deque<Pending> pending_;
  int dropped_ = 0;
  std::string last_drop_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_TRANSPORT_HELLO_ACCEPTOR_H_
