// EtcdStore: the Store contract (store.h) on etcd's v3 API, so that what
// runs on lockstep's own store (the launcher's rendezvous, a job's set-up)
// runs unchanged on the etcd a cluster already operates; plus etcd's
// leases and watches, which an agent uses to prove it is alive.
//
//   EtcdClientOptions c;
//   c.endpoints = {"10.0.0.1:2379"};
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<EtcdStore> store, EtcdStore::Create(c, "/lockstep-run/job42/"));
//   LOCKSTEP_RETURN_IF_ERROR(store->Set("rank0/addr", "10.0.0.5:4242"));
//   LOCKSTEP_ASSIGN_OR_RETURN(std::vector<std::string> addrs, store->MultiGet({"rank0/addr", "rank1/addr"}));
//
// How each call maps (keys are `prefix` + key):
// - Set, DeleteKey, NumKeys: one put, delete range or counted range.
// - Get, Wait, MultiGet, Check: one transaction of ranges (128 keys per
//   transaction, etcd's default --max-txn-ops); missing keys are then
//   watched from the revision the ranges saw, so no write between the two
//   is missed and nothing polls.
// - Add, CompareSet: read, then a transaction that writes only if the key's
//   mod revision (or absence) is unchanged, else again: the same answers as
//   HashStore's (store_ops.h), atomic across clients.
// Values may be any bytes (base64 on the wire). Safe from several threads.
#ifndef LOCKSTEP_COLLECTIVES_STORE_ETCD_ETCD_STORE_H_
#define LOCKSTEP_COLLECTIVES_STORE_ETCD_ETCD_STORE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectives/store/etcd/etcd_client.h"
#include "collectives/store/store.h"
#include "collectives/store/store_ops.h"

namespace lockstep {

// One change seen by a watch: a put (with its value) or a delete, the key
// without the store's prefix.
struct EtcdEvent {
  bool deleted = false;
  std::string key;
  std::string value;
};

class EtcdStore : public Store {
 public:
  // Connects (one call to check that etcd answers) and returns a store whose
  // keys live under `prefix`. The store's timeout bounds each request too.
  static absl::StatusOr<std::unique_ptr<EtcdStore>> Create(const EtcdClientOptions& client, std::string prefix,
                                                           Milliseconds timeout = kDefaultStoreTimeout);

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, Milliseconds timeout) override;
  using Store::Get;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override;
  absl::Status Wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  using Store::Wait;
  absl::StatusOr<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys,
                                                    Milliseconds timeout) override;
  using Store::MultiGet;
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys) override;
  absl::StatusOr<bool> DeleteKey(absl::string_view key) override;
  absl::StatusOr<int64_t> NumKeys() override;

  // Leases: a key put with a lease vanishes when the lease is revoked or not
  // kept alive for its TTL (etcd rounds a TTL under its minimum, ~2 s, up).
  absl::StatusOr<int64_t> GrantLease(std::chrono::seconds ttl);
  // Renews `lease`; returns its TTL, 0 when it has already expired.
  absl::StatusOr<int64_t> KeepAliveOnce(int64_t lease);
  absl::Status RevokeLease(int64_t lease);
  absl::Status SetWithLease(absl::string_view key, absl::string_view value, int64_t lease);

  // Every key under `sub` (relative to the store's prefix) with its value,
  // and the revision they were read at.
  absl::StatusOr<std::map<std::string, std::string>> ListPrefix(absl::string_view sub, int64_t* revision);
  // Delivers each change under `sub` after `after_revision` to `on_events`
  // until it returns false (OK), `timeout` passes (DeadlineExceeded) or
  // `cancel` becomes true (Cancelled).
  absl::Status WatchPrefix(absl::string_view sub, int64_t after_revision, Milliseconds timeout,
                           const std::function<bool(const std::vector<EtcdEvent>&)>& on_events,
                           const std::atomic<bool>* cancel = nullptr);

  const std::string& prefix() const { return prefix_; }
  std::string where() const { return client_->where(); }

 private:
  EtcdStore(std::unique_ptr<EtcdClient> client, std::string prefix);

  struct Read {
    std::map<std::string, std::string> values;  // Present keys (full names).
    std::map<std::string, int64_t> mod_revision;
    int64_t revision = 0;  // The first transaction's revision.
  };
  absl::StatusOr<Read> RangeMany(const std::vector<std::string>& full_keys, Milliseconds timeout);
  // Waits until every key of `full_keys` is in `read->values` (watching
  // from read->revision), keeping read->values current.
  absl::Status WaitPresent(const std::vector<std::string>& full_keys, Read* read, Milliseconds timeout);
  // Add and CompareSet: `change` sees the key's current value (absent: not
  // in the map), may change it, and returns the call's answer; the change is
  // written only if nobody wrote the key meanwhile.
  absl::StatusOr<std::string> ReadModifyWrite(
      absl::string_view key, const std::function<absl::StatusOr<std::string>(store_ops::Map&)>& change);
  absl::Status WatchKeys(const std::vector<std::string>& missing, int64_t after_revision, Milliseconds timeout,
                         const std::function<bool(const EtcdEvent&)>& on_event);
  std::string Full(absl::string_view key) const { return prefix_ + std::string(key); }

  std::unique_ptr<EtcdClient> client_;
  std::string prefix_;
};

// The first key after every key that starts with `prefix` (etcd's range_end
// for a prefix); "\0" (every key) for an empty prefix.
std::string EtcdPrefixEnd(absl::string_view prefix);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_STORE_ETCD_ETCD_STORE_H_
