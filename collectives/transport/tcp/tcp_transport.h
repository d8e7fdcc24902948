// TcpTransport: a full mesh of TCP connections between the ranks of a group,
// set up through a Store.
//
//   TcpTransportOptions options;
//   options.host = "10.0.0.2";   // the address the other ranks reach this one at
//   LOCKSTEP_ASSIGN_OR_RETURN(auto transport,
//       TcpTransport::Create(store, rank, world_size, options));
//
// Each rank listens on a free port of `host` only and publishes "host:port"
// under "tcp_transport/<rank>". Every pair of ranks has two connections,
// one per direction: each rank connects to every other rank for its sends
// and accepts one connection from every other rank for its receives, with a
// handshake (magic, version, ranks, world size and, given a secret, a
// challenge-response: collectives/transport/tcp/rank_handshake.h) checked on both sides. One
// socket per direction keeps a rank's sends and receives off each other's
// socket lock (with one shared socket, data arriving while the owner is in
// sendmsg goes to the socket's backlog and is processed late, in the
// sender's context). Sockets use TCP_NODELAY and fixed buffers; all I/O is
// non-blocking and driven by poll() with the caller's deadline.
//
// Receives honour Transfer::consume (ConsumesInPlace() is true): their
// payload is read into one cache-sized receive buffer of the transport, a
// piece at a time, and handed over from there, so a reduction reads it while
// it is in the cache and an algorithm needs no chunk-sized scratch (the ring
// once held half the buffer as scratch for 2 ranks).
#ifndef LOCKSTEP_COLLECTIVES_TRANSPORT_TCP_TCP_TRANSPORT_H_
#define LOCKSTEP_COLLECTIVES_TRANSPORT_TCP_TCP_TRANSPORT_H_

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/store/store.h"
#include "collectives/transport/message_header.h"
#include "collectives/transport/tcp/socket.h"
#include "collectives/transport/transport.h"

namespace lockstep {

struct TcpTransportOptions {
  // The address the other ranks reach this rank at (its interface toward them).
  std::string host = "127.0.0.1";
  Milliseconds timeout = kDefaultStoreTimeout;  // For setting up the mesh.
  // The group's secret (the store token, LOCKSTEP_STORE_TOKEN): with it,
  // every connection proves it (collectives/transport/tcp/rank_handshake.h) and others
  // are dropped; empty: connections are not authenticated.
  std::string secret;
  // A peer's published address that refuses connections fails at once; one
  // that does not answer fails after this long.
  Milliseconds connect_timeout = Milliseconds(10000);
  // How long an accepted connection may take to introduce itself before it
  // is dropped (setup goes on waiting for the real rank).
  Milliseconds handshake_timeout = Milliseconds(5000);
  // SO_SNDBUF/SO_RCVBUF of every connection; 0 leaves the kernel's autotuning.
  int socket_buffer_bytes = 256 << 10;
  // TCP congestion control of the mesh's sockets ("" keeps the system's).
  // cubic, not bbr: bbr paces the bursts a collective sends at once
  // (docs/PERFORMANCE.md has the measurements).
  std::string congestion_control = "cubic";
  // How long a waiting transfer keeps trying (yielding the CPU between
  // tries) before it sleeps in poll(): small messages usually arrive sooner
  // than a sleeping thread wakes up. 0..1000000.
  int spin_microseconds = 200;
};

// InvalidArgument naming the bad field and the accepted range.
absl::Status ValidateTcpTransportOptions(const TcpTransportOptions& options);

class TcpTransport : public Transport {
 public:
  static absl::StatusOr<std::unique_ptr<TcpTransport>> Create(Store& store, int rank, int size,
                                                              const TcpTransportOptions& options);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string PeerName(int peer) const override;
  absl::Status Exchange(absl::Span<Transfer> transfers, MessageTag tag, Deadline deadline) override;
  absl::Status ExchangeOpen(TransferFeed& feed, Deadline deadline) override;
  TrafficCounters Traffic() const override;
  void Abort(absl::string_view reason) override;
  bool ConsumesInPlace() const override { return true; }

  // The receive buffer's size: consume pieces are at most this long.
  static constexpr size_t kConsumeBufferBytes = 256 << 10;

 private:
  TcpTransport(int rank, int size, const TcpTransportOptions& options)
      : rank_(rank), size_(size), options_(options), peers_(static_cast<size_t>(size)), traffic_(size) {}

  // Exchange and ExchangeOpen: the initial transfers, then the feed's.
  absl::Status Run(absl::Span<Transfer> initial, MessageTag tag, Deadline deadline, TransferFeed* feed);
  // One Exchange or ExchangeOpen (tcp_transport.cc).
  class Op;

  struct Peer {
    Fd send_fd;  // connected by this rank: carries its messages to the peer
    Fd recv_fd;  // accepted from the peer: carries the peer's messages here
    std::string address;
    // A message header read from recv_fd but left for the next receive
    // (a routed receive's LeaveMessage); its payload is still in the socket.
    bool held = false;
    MessageHeader held_header{};
  };

  const int rank_;
  const int size_;
  const TcpTransportOptions options_;
  std::vector<Peer> peers_;
  bool aborted_ = false;
  TrafficTally traffic_;  // Payload bytes per peer.
  // Where receives with `consume` land (made at their first use; one
  // exchange runs at a time, and it hands each piece over before it reads
  // the next).
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> consume_buffer_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_TRANSPORT_TCP_TCP_TRANSPORT_H_
