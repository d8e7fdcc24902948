// TcpStore: a Store served over TCP, like c10d's TCPStore.
//
//   TcpStoreOptions options;
//   options.host = "10.0.0.1";        // where the server runs
//   options.port = 29500;             // 0 on the server picks a free port
//   options.is_server = (rank == 0);  // the server runs in a thread of this process
//   options.num_workers = world_size; // the server waits for them all (optional)
//   if (const char* token = getenv("LOCKSTEP_STORE_TOKEN")) options.token = token;  // optional shared secret
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TcpStore> store, TcpStore::Create(options));
//   store->port();                    // the real port, for the others
//
// Clients retry connecting until the timeout, so the server may start after
// them. The wire format (collectives/store/store_wire.h) is validated field by
// field; a client that sends garbage is dropped without disturbing the server
// or other clients. With a token, clients without it are refused. One
// server thread multiplexes all clients with epoll, doing work only for the
// connections that have something to do (tools/bench:store_load measures it
// with thousands of clients). MultiGet asks for many keys in one request per
// 1,024 keys. A TcpStore may be shared by threads: each call uses its own
// connection from a small pool. TcpStoreServer runs a server alone (the
// launcher's rendezvous).
//
// Resource limits (TcpStoreLimits), so that no client, with or without the
// token, can starve the others:
// - at most `max_connections` open connections; beyond that, and while
//   accept() fails for want of descriptors (EMFILE/ENFILE), new connections
//   wait in the listen backlog and the server keeps serving the connected ones;
// - a connection must complete HELLO within `hello_timeout`; before HELLO the
//   only frame accepted is a HELLO of at most store_wire::kMaxHelloBodyBytes,
//   and any other header closes the connection at once;
// - a request frame must arrive, and its reply be taken, within
//   `frame_timeout` of its first byte (an idle connection between frames may
//   stay, as the client's pool keeps them);
// - per connection at most one request frame is buffered and one reply is
//   queued: the server reads a client's next request only once its previous
//   reply is sent, and handles at most one request per connection per epoll
//   round, so a client that pipelines requests and never reads cannot grow
//   the server's memory or delay the others.
#ifndef LOCKSTEP_COLLECTIVES_STORE_TCP_STORE_H_
#define LOCKSTEP_COLLECTIVES_STORE_TCP_STORE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/store/store.h"
#include "collectives/store/store_wire.h"
#include "collectives/transport/tcp/socket.h"

namespace lockstep {

// See "Resource limits" above.
struct TcpStoreLimits {
  // Below Linux's default descriptor limit (1024) with room for the process's
  // own files and sockets.
  int max_connections = 1000;
  Milliseconds hello_timeout{5000};
  Milliseconds frame_timeout{30000};
};

// A snapshot of the server's state, for tests and monitoring.
struct TcpStoreServerStats {
  int64_t connections = 0;    // Open, with or without HELLO.
  int64_t authenticated = 0;  // HELLO accepted.
  int64_t pending_waits = 0;  // GET/WAIT requests parked until their keys exist.
  // Memory held by all connections' input and output buffers (capacity).
  int64_t buffered_bytes = 0;
  int64_t dropped_hello_timeout = 0;
  int64_t dropped_frame_timeout = 0;
  int64_t dropped_bad_frame = 0;    // Garbage, oversized or out-of-order frames.
  int64_t accept_backoffs = 0;      // accept() out of descriptors (EMFILE, ENFILE).
  int64_t accept_limit_pauses = 0;  // Rounds that left the listener alone at max_connections.
};

struct TcpStoreServerOptions {
  std::string host = "0.0.0.0";  // Interface to listen on.
  int port = 0;                  // 0 picks a free port.
  std::string token;             // Empty: no token required.
  TcpStoreLimits limits;
};

class TcpStoreServer {
 public:
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Start(const TcpStoreServerOptions& options);
  ~TcpStoreServer();  // Stops the server thread and closes every connection.
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }
  // As of the end of the server's latest epoll round.
  TcpStoreServerStats stats() const;

 private:
  TcpStoreServer() = default;
  void Run();

  Fd listen_;
  Fd wake_;  // eventfd: written by the destructor to stop Run().
  int port_ = 0;
  std::string token_;
  TcpStoreLimits limits_;
  mutable std::mutex stats_mu_;
  TcpStoreServerStats stats_;  // Guarded by stats_mu_; published by the server thread.
  std::thread thread_;
};

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  bool is_server = false;
  // > 0: every client counts itself in; the server (if wait_for_workers)
  // returns from Create only when all have arrived.
  int64_t num_workers = -1;
  bool wait_for_workers = true;
  Milliseconds timeout = kDefaultStoreTimeout;
  std::string token;             // At most store_wire::kMaxTokenBytes.
  TcpStoreLimits server_limits;  // The server's (is_server only).
};

class TcpStore : public Store {
 public:
  static absl::StatusOr<std::unique_ptr<TcpStore>> Create(const TcpStoreOptions& options);

  int port() const { return port_; }
  const std::string& host() const { return host_; }
  // The server this store runs (is_server), else null.
  const TcpStoreServer* server() const { return server_.get(); }

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, Milliseconds timeout) override;
  using Store::Get;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override;
  absl::Status Wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  using Store::Wait;
  // One request per kMultiGetKeysPerRequest (1,024) keys, one after
  // another (each reply's values at most kMaxValueBytes together).
  absl::StatusOr<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys,
                                                    Milliseconds timeout) override;
  using Store::MultiGet;
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys) override;
  absl::StatusOr<bool> DeleteKey(absl::string_view key) override;
  absl::StatusOr<int64_t> NumKeys() override;

 private:
  TcpStore() = default;
  // A connection that has said HELLO: an idle one, or a new one.
  absl::StatusOr<Fd> TakeConnection(Deadline deadline);
  void ReturnConnection(Fd fd);
  // Sends one request and reads its response; `wait` is how long the server
  // may legitimately hold the answer (GET/WAIT).
  absl::StatusOr<store_wire::Response> Call(const store_wire::Request& request, Milliseconds wait);

  std::unique_ptr<TcpStoreServer> server_;
  std::string host_;
  int port_ = 0;
  std::string token_;
  // Idle connections. A call takes one for its duration, so threads sharing
  // a TcpStore never wait behind each other's blocking Get/Wait.
  std::mutex mu_;
  std::vector<Fd> idle_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_STORE_TCP_STORE_H_
