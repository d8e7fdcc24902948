// TcpStore: a Store served over TCP, like c10d's TCPStore.
//
//   TcpStoreOptions options;
//   options.host = "10.0.0.1";        // where the server runs
//   options.port = 29500;             // 0 on the server picks a free port
//   options.is_server = (rank == 0);  // the server runs in a thread of this process
//   options.num_workers = world_size; // the server waits for them all (optional)
//   options.token = getenv("LOCKSTEP_STORE_TOKEN");  // optional shared secret
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TcpStore> store, TcpStore::Create(options));
//   store->port();                    // the real port, for the others
//
// Clients retry connecting until the timeout, so the server may start after
// them. The wire format (collectives/store_wire.h) is validated field by
// field; a client that sends garbage is dropped without disturbing the server
// or other clients. With a token, clients without it are refused. One
// server thread multiplexes all clients with poll(): hundreds of clients
// (tests use 256) are fine. A TcpStore may be shared by threads: each call
// uses its own connection from a small pool. TcpStoreServer runs a server alone (the
// launcher's rendezvous).
#ifndef LOCKSTEP_COLLECTIVES_TCP_STORE_H_
#define LOCKSTEP_COLLECTIVES_TCP_STORE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/socket.h"
#include "collectives/store.h"
#include "collectives/store_wire.h"

namespace lockstep {

struct TcpStoreServerOptions {
  std::string host = "0.0.0.0";  // Interface to listen on.
  int port = 0;                   // 0 picks a free port.
  std::string token;              // Empty: no token required.
};

class TcpStoreServer {
 public:
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Start(const TcpStoreServerOptions& options);
  ~TcpStoreServer();  // Stops the server thread and closes every connection.
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }

 private:
  TcpStoreServer() = default;
  void Run();

  Fd listen_;
  Fd wake_;  // eventfd: written by the destructor to stop Run().
  int port_ = 0;
  std::string token_;
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
  std::string token;
};

class TcpStore : public Store {
 public:
  static absl::StatusOr<std::unique_ptr<TcpStore>> Create(const TcpStoreOptions& options);

  int port() const { return port_; }
  const std::string& host() const { return host_; }

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, Milliseconds timeout) override;
  using Store::Get;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override;
  absl::Status Wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  using Store::Wait;
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

#endif  // LOCKSTEP_COLLECTIVES_TCP_STORE_H_
