// EtcdClient: etcd's v3 API over its HTTP/JSON gateway (etcd >= 3.4), the
// calls a Store and an agent's liveness need: one request and its answer,
// and streams (watch) that deliver each message as it comes.
//
//   EtcdClientOptions o;
//   o.endpoints = {"http://10.0.0.1:2379"};
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<EtcdClient> etcd, EtcdClient::Create(o));
//   nlohmann::json put = {{"key", EtcdClient::Encode("a")}, {"value", EtcdClient::Encode("1")}};
//   LOCKSTEP_ASSIGN_OR_RETURN(nlohmann::json answer, etcd->Call("/v3/kv/put", put, Milliseconds(5000)));
//
// Why the gateway and libcurl rather than gRPC: every etcd since 3.4 serves
// it on the client port, TLS and client certificates come from libcurl's
// options, and nothing generated has to be built. Keys and values are
// base64 in the JSON (Encode/Decode); 64-bit numbers come as strings
// (Int). Several endpoints: a call that cannot connect tries the next.
#ifndef LOCKSTEP_COLLECTIVES_STORE_ETCD_ETCD_CLIENT_H_
#define LOCKSTEP_COLLECTIVES_STORE_ETCD_ETCD_CLIENT_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace lockstep {

struct EtcdClientOptions {
  // "http://host:port" or "https://host:port"; "host:port" takes `protocol`.
  std::vector<std::string> endpoints;
  std::string protocol = "http";
  std::string ca_cert;      // PEM file that signed the server's certificate.
  std::string client_cert;  // PEM client certificate (etcd --client-cert-auth).
  std::string client_key;   // Its key.
  std::chrono::milliseconds connect_timeout{5000};
};

class EtcdClient {
 public:
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(EtcdClientOptions options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // POSTs `request` to `path` ("/v3/kv/range") and returns the answer.
  // etcd's own errors ({"error": ..., "code": N}) become a Status with its
  // gRPC code and message; a transport failure is Unavailable naming the
  // endpoints tried.
  absl::StatusOr<nlohmann::json> Call(absl::string_view path, const nlohmann::json& request,
                                      std::chrono::milliseconds timeout) const;

  // A stream (`/v3/watch`): `on_message` gets each message ("result" of the
  // gateway's envelope) and returns false to end the stream. Returns OK when
  // `on_message` ended it, DeadlineExceeded at `timeout`, Cancelled when
  // `cancel` became true, else the failure (the server closed it, a
  // transport error, an etcd error inside the stream).
  absl::Status Stream(absl::string_view path, const nlohmann::json& request, std::chrono::milliseconds timeout,
                      const std::function<bool(const nlohmann::json&)>& on_message,
                      const std::atomic<bool>* cancel = nullptr) const;

  // "host:port, ..." for messages.
  std::string where() const;

  static std::string Encode(absl::string_view bytes);
  static absl::StatusOr<std::string> Decode(const nlohmann::json& field);
  // A 64-bit field (a string in the gateway's JSON; absent = 0).
  static int64_t Int(const nlohmann::json& object, const char* field);

 private:
  explicit EtcdClient(EtcdClientOptions options);
  std::string Url(size_t endpoint, absl::string_view path) const;

  EtcdClientOptions options_;
  // The endpoint that answered last: tried first.
  mutable std::atomic<size_t> preferred_{0};
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_STORE_ETCD_ETCD_CLIENT_H_
