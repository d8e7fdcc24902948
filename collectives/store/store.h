// Store: the key-value rendezvous store that processes use to find each
// other, as c10d's Store.
//
//   LOCKSTEP_RETURN_IF_ERROR(store.Set("rank0/addr", "127.0.0.1:4242"));
//   LOCKSTEP_ASSIGN_OR_RETURN(std::string addr, store.Get("rank1/addr"));  // waits
//   LOCKSTEP_ASSIGN_OR_RETURN(int64_t arrived, store.Add("arrived", 1));
//
// Values are arbitrary bytes. Every blocking call takes a timeout (the
// store's default when omitted) and fails with DeadlineExceeded naming the
// keys it waited for, never hangs. Implementations: TcpStore
// (collectives/store/tcp_store.h), HashStore (in-process), PrefixStore
// (namespacing over another store). All are safe to use from several
// threads.
#ifndef LOCKSTEP_COLLECTIVES_STORE_STORE_H_
#define LOCKSTEP_COLLECTIVES_STORE_STORE_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {

using Milliseconds = std::chrono::milliseconds;

inline constexpr Milliseconds kDefaultStoreTimeout{300000};  // c10d's 300 s.

class Store {
 public:
  virtual ~Store() = default;

  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;

  // The value of `key`, waiting up to `timeout` for it to be set.
  virtual absl::StatusOr<std::string> Get(absl::string_view key, Milliseconds timeout) = 0;
  absl::StatusOr<std::string> Get(absl::string_view key) { return Get(key, timeout()); }

  // Adds `delta` to the integer stored at `key` (0 if absent) and returns the
  // new value. A key holding something else than a decimal integer is an error.
  virtual absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) = 0;

  // c10d's compareSet: if `key` holds `expected` (or is absent and `expected`
  // is empty) it is set to `desired`. Returns the value now stored, or
  // `expected` when the key is absent and `expected` is not empty.
  virtual absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                                 absl::string_view desired) = 0;

  // Waits until every key exists.
  virtual absl::Status Wait(const std::vector<std::string>& keys, Milliseconds timeout) = 0;
  absl::Status Wait(const std::vector<std::string>& keys) { return Wait(keys, timeout()); }

  // The values of `keys`, in order, once every one exists (waiting up to
  // `timeout`): what Wait then one Get per key gives, in a few round trips
  // where the store can (TcpStore: one request per 1,024 keys; EtcdStore:
  // one transaction per 128). The default does exactly Wait then Get.
  virtual absl::StatusOr<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys, Milliseconds timeout);
  absl::StatusOr<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys) {
    return MultiGet(keys, timeout());
  }

  // True when every key exists (no waiting).
  virtual absl::StatusOr<bool> Check(const std::vector<std::string>& keys) = 0;

  // True when the key existed.
  virtual absl::StatusOr<bool> DeleteKey(absl::string_view key) = 0;

  virtual absl::StatusOr<int64_t> NumKeys() = 0;

  Milliseconds timeout() const { return timeout_; }
  void set_timeout(Milliseconds timeout) { timeout_ = timeout; }

 private:
  Milliseconds timeout_ = kDefaultStoreTimeout;
};

inline absl::StatusOr<std::vector<std::string>> Store::MultiGet(const std::vector<std::string>& keys,
                                                                Milliseconds timeout) {
  absl::Status waited = Wait(keys, timeout);
  if (!waited.ok()) return waited;
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const std::string& key : keys) {
    absl::StatusOr<std::string> value = Get(key, timeout);
    if (!value.ok()) return value.status();
    values.push_back(*std::move(value));
  }
  return values;
}

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_STORE_STORE_H_
