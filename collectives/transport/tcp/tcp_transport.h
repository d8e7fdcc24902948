// TcpTransport: TCP connections between the ranks of a group, set up
// through a Store and made when an algorithm first needs them.
//
//   TcpTransportOptions options;
//   options.host = "10.0.0.2";   // the address the other ranks reach this one at
//   LOCKSTEP_ASSIGN_OR_RETURN(auto transport,
//       TcpTransport::Create(store, rank, world_size, options));
//
// Each rank listens on a free port of `host` only and publishes "host:port"
// under "tcp_transport/<rank>"; Create returns once every rank has
// published (a missing or duplicated RANK is named there). A pair of ranks
// talks over two connections, one per direction: a rank connects to a peer
// the first time it sends to it, and accepts the peer's connection for its
// receives, with a handshake (magic, version, ranks, world size and, given
// a secret, a challenge-response: collectives/transport/tcp/rank_handshake.h)
// checked on both sides before any data moves. So a rank holds connections
// only to the peers its algorithms use (recursive doubling: log2 p of them;
// the ring: two) and set-up makes no p^2 handshakes; `full_mesh` connects
// every pair inside Create instead, as before. One socket per direction
// keeps a rank's sends and receives off each other's socket lock (with one
// shared socket, data arriving while the owner is in sendmsg goes to the
// socket's backlog and is processed late, in the sender's context). Sockets
// use TCP_NODELAY and fixed buffers; all I/O is non-blocking and driven by
// poll() with the caller's deadline.
//
// Connections on demand keep the listener open until every peer has
// connected: a stranger that connects meanwhile is dropped at its
// handshake (with a secret) without holding up the ranks' transfers.
//
// Receives honour Transfer::consume (ConsumesInPlace() is true): their
// payload is read into one cache-sized receive buffer of the transport, a
// piece at a time, and handed over from there, so a reduction reads it while
// it is in the cache and an algorithm needs no chunk-sized scratch (the ring
// once held half the buffer as scratch for 2 ranks).
#ifndef LOCKSTEP_COLLECTIVES_TRANSPORT_TCP_TCP_TRANSPORT_H_
#define LOCKSTEP_COLLECTIVES_TRANSPORT_TCP_TCP_TRANSPORT_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/store/store.h"
#include "collectives/transport/message_header.h"
#include "collectives/transport/tcp/socket.h"
#include "collectives/transport/transport.h"

namespace lockstep {

class HelloAcceptor;

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
  // Connect every pair of ranks inside Create (2p(p - 1) handshakes, 2(p - 1)
  // sockets per rank) instead of on first use; then a stranger or a wrong
  // token fails Create itself rather than the first transfer.
  bool full_mesh = false;
};

// InvalidArgument naming the bad field and the accepted range.
absl::Status ValidateTcpTransportOptions(const TcpTransportOptions& options);

class TcpTransport : public Transport {
 public:
  // Reads every peer's address while it is created (and so waits for
  // every rank to publish): `store` need not outlive the transport.
  static absl::StatusOr<std::unique_ptr<TcpTransport>> Create(Store& store, int rank, int size,
                                                              const TcpTransportOptions& options);
  // Keeps `store` and reads a peer's address when it first connects to it
  // (unless `full_mesh`): a rank reads the addresses of the peers its
  // algorithms use, not all p, and Create waits for no other rank. A rank
  // that never publishes is named by the first exchange that needs it.
  static absl::StatusOr<std::unique_ptr<TcpTransport>> Create(std::shared_ptr<Store> store, int rank, int size,
                                                              const TcpTransportOptions& options);
  ~TcpTransport() override;

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
  TcpTransport(int rank, int size, const TcpTransportOptions& options);

  static absl::StatusOr<std::unique_ptr<TcpTransport>> CreateWith(Store& store, std::shared_ptr<Store> keep, int rank,
                                                                  int size, const TcpTransportOptions& options);

  // Exchange and ExchangeOpen: the initial transfers, then the feed's.
  absl::Status Run(absl::Span<Transfer> initial, MessageTag tag, Deadline deadline, TransferFeed* feed);
  // One Exchange or ExchangeOpen (tcp_transport.cc).
  class Op;

  // Both directions' handshakes, made inside Create or by an exchange
  // (tcp_transport.cc).
  struct Handshake;
  bool Accepting() const { return acceptor_ != nullptr; }

  struct Peer {
    Fd send_fd;                           // connected by this rank: carries its messages to the peer
    Fd recv_fd;                           // accepted from the peer: carries the peer's messages here
    std::string address;                  // Empty until read from the store.
    std::array<uint8_t, 16> challenge{};  // What it published.
    // The send connection: not made yet, made and waiting for the peer's
    // answer, or checked.
    enum class Link : uint8_t { kNone, kAnswering, kReady };
    Link send = Link::kNone;
    std::array<uint8_t, 16> sent_nonce{};
    std::array<uint8_t, 64> answer{};  // Its hello, as far as it came.
    size_t answer_got = 0;
    // A message header read from recv_fd but left for the next receive
    // (a routed receive's LeaveMessage); its payload is still in the socket.
    bool held = false;
    MessageHeader held_header{};
  };

  const int rank_;
  const int size_;
  const TcpTransportOptions options_;
  std::vector<Peer> peers_;
  std::atomic<bool> aborted_{false};
  TrafficTally traffic_;  // Payload bytes per peer.
  // Where peers' addresses are read on first use (null: all were read by
  // Create).
  std::shared_ptr<Store> store_;
  // Until every peer has connected: the listener and what is arriving on it.
  Fd listener_;
  std::string address_;
  std::array<uint8_t, 16> challenge_{};
  std::unique_ptr<HelloAcceptor> acceptor_;
  int accepted_ = 0;
  // Held while a connection is stored (the exchanging thread) and by
  // Abort, which may run on another thread.
  std::mutex links_mu_;
  std::vector<Fd> abort_fds_;  // Abort's own connections, kept open.
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
