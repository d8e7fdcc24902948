// EtcdServer: a real etcd (Debian's etcd-server) for a test, on free
// loopback ports with a data directory of its own; stopped and removed when
// the object goes, and killed with the test process if that dies first.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<EtcdServer> etcd, EtcdServer::Start());
//   EtcdClientOptions o;
//   o.endpoints = {etcd->endpoint()};  // "127.0.0.1:PORT"
#ifndef LOCKSTEP_COLLECTIVES_STORE_ETCD_TESTING_ETCD_SERVER_H_
#define LOCKSTEP_COLLECTIVES_STORE_ETCD_TESTING_ETCD_SERVER_H_

#include <sys/types.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep {

class EtcdServer {
 public:
  // Extra etcd flags (TLS files, --client-cert-auth); with TLS the client
  // URL is https.
  static absl::StatusOr<std::unique_ptr<EtcdServer>> Start(std::vector<std::string> extra_flags = {}, bool tls = false);
  ~EtcdServer();
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  std::string endpoint() const { return endpoint_; }
  // What etcd has logged so far (for a failing test's message).
  std::string log() const;

 private:
  EtcdServer() = default;

  pid_t pid_ = -1;
  int log_fd_ = -1;
  std::string data_dir_;
  std::string endpoint_;
  std::thread drain_;
  mutable std::mutex mu_;
  std::condition_variable ready_cv_;
  std::string log_;
  bool ready_ = false;
  bool exited_ = false;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_STORE_ETCD_TESTING_ETCD_SERVER_H_
