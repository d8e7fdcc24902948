#include "collectives/store/etcd/etcd_store.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/store/store_ops.h"
#include "core/deadline.h"

namespace lockstep {
namespace {

using nlohmann::json;

// etcd's default --max-txn-ops.
constexpr size_t kMaxTxnOps = 128;
// Add and CompareSet retry while other clients keep writing the same key;
// each retry means another client's write went through, so the bound only
// catches a livelock.
constexpr int kMaxWriteRetries = 10000;

// The events of one watch message, keys as etcd has them (full names).
std::vector<EtcdEvent> ParseEvents(const json& result) {
  std::vector<EtcdEvent> events;
  if (!result.contains("events")) return events;  // "created", progress.
  for (const json& e : result["events"]) {
    EtcdEvent event;
    event.deleted = e.value("type", std::string()) == "DELETE";
    absl::StatusOr<std::string> k = EtcdClient::Decode(e["kv"]["key"]);
    if (!k.ok()) continue;
    event.key = *std::move(k);
    if (!event.deleted) {
      absl::StatusOr<std::string> v = EtcdClient::Decode(e["kv"].contains("value") ? e["kv"]["value"] : json());
      if (v.ok()) event.value = *std::move(v);
    }
    events.push_back(std::move(event));
  }
  return events;
}

Milliseconds Left(Deadline deadline) {
  const auto left = std::chrono::ceil<Milliseconds>(deadline - SteadyClock::now());
  return std::max(left, Milliseconds(1));
}

}  // namespace

std::string EtcdPrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    const unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

EtcdStore::EtcdStore(std::unique_ptr<EtcdClient> client, std::string prefix)
    : client_(std::move(client)), prefix_(std::move(prefix)) {}

absl::StatusOr<std::unique_ptr<EtcdStore>> EtcdStore::Create(const EtcdClientOptions& client, std::string prefix,
                                                             Milliseconds timeout) {
  absl::StatusOr<std::unique_ptr<EtcdClient>> c = EtcdClient::Create(client);
  if (!c.ok()) return c.status();
  std::unique_ptr<EtcdStore> store(new EtcdStore(*std::move(c), std::move(prefix)));
  store->set_timeout(timeout);
  // One counted range: etcd answers, and this client may read.
  absl::StatusOr<int64_t> keys = store->NumKeys();
  if (!keys.ok()) return keys.status();
  return store;
}

absl::Status EtcdStore::Set(absl::string_view key, absl::string_view value) {
  json put = {{"key", EtcdClient::Encode(Full(key))}, {"value", EtcdClient::Encode(value)}};
  return client_->Call("/v3/kv/put", put, timeout()).status();
}

absl::Status EtcdStore::SetWithLease(absl::string_view key, absl::string_view value, int64_t lease) {
  json put = {
      {"key", EtcdClient::Encode(Full(key))}, {"value", EtcdClient::Encode(value)}, {"lease", std::to_string(lease)}};
  return client_->Call("/v3/kv/put", put, timeout()).status();
}

absl::StatusOr<EtcdStore::Read> EtcdStore::RangeMany(const std::vector<std::string>& full_keys, Milliseconds timeout) {
  Read read;
  std::vector<std::string> unique(full_keys);
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  for (size_t begin = 0; begin < unique.size(); begin += kMaxTxnOps) {
    json ops = json::array();
    const size_t end = std::min(unique.size(), begin + kMaxTxnOps);
    for (size_t i = begin; i < end; ++i) {
      ops.push_back({{"request_range", {{"key", EtcdClient::Encode(unique[i])}}}});
    }
    absl::StatusOr<json> answer = client_->Call("/v3/kv/txn", json{{"success", ops}}, timeout);
    if (!answer.ok()) return answer.status();
    if (begin == 0) read.revision = EtcdClient::Int((*answer)["header"], "revision");
    if (!answer->contains("responses")) continue;
    for (const json& r : (*answer)["responses"]) {
      if (!r.contains("response_range") || !r["response_range"].contains("kvs")) continue;
      for (const json& kv : r["response_range"]["kvs"]) {
        absl::StatusOr<std::string> k = EtcdClient::Decode(kv["key"]);
        absl::StatusOr<std::string> v = EtcdClient::Decode(kv.contains("value") ? kv["value"] : json());
        if (!k.ok()) return k.status();
        if (!v.ok()) return v.status();
        read.values[*k] = *std::move(v);
        read.mod_revision[*k] = EtcdClient::Int(kv, "mod_revision");
      }
    }
  }
  return read;
}

absl::Status EtcdStore::WatchKeys(const std::vector<std::string>& missing, int64_t after_revision, Milliseconds timeout,
                                  const std::function<bool(const EtcdEvent&)>& on_event) {
  // One watch over the span of the missing keys; the caller skips events
  // for keys in between that it does not wait for.
  const auto [lo, hi] = std::minmax_element(missing.begin(), missing.end());
  json create = {{"key", EtcdClient::Encode(*lo)},
                 {"range_end", EtcdClient::Encode(*hi + std::string(1, '\0'))},
                 {"start_revision", std::to_string(after_revision + 1)}};
  int64_t compacted = 0;
  absl::Status s = client_->Stream("/v3/watch", json{{"create_request", create}}, timeout, [&](const json& result) {
    if (result.value("canceled", false)) {
      compacted = EtcdClient::Int(result, "compact_revision");
      if (compacted == 0) compacted = -1;
      return false;
    }
    for (const EtcdEvent& event : ParseEvents(result)) {
      if (!on_event(event)) return false;
    }
    return true;
  });
  if (compacted > 0) {
    return absl::OutOfRangeError(absl::StrCat("etcd compacted past revision ", after_revision + 1));
  }
  if (compacted < 0) {
    return absl::AbortedError(absl::StrCat("etcd at ", client_->where(), " cancelled a watch"));
  }
  return s;
}

absl::Status EtcdStore::WaitPresent(const std::vector<std::string>& full_keys, Read* read, Milliseconds timeout) {
  const Deadline deadline = DeadlineIn(timeout);
  const std::set<std::string> wanted(full_keys.begin(), full_keys.end());
  for (;;) {
    std::vector<std::string> missing;
    for (const std::string& k : wanted) {
      if (read->values.count(k) == 0) missing.push_back(k);
    }
    if (missing.empty()) return absl::OkStatus();
    size_t left = missing.size();
    absl::Status s = WatchKeys(missing, read->revision, Left(deadline), [&](const EtcdEvent& e) {
      if (wanted.count(e.key) == 0) return true;
      const bool had = read->values.count(e.key) != 0;
      if (e.deleted) {
        if (had) ++left;
        read->values.erase(e.key);
      } else {
        if (!had) --left;
        read->values[e.key] = e.value;
      }
      return left > 0;  // Stop once all are there.
    });
    // A deadline is the caller's to describe (MultiGet names the keys).
    if (s.code() != absl::StatusCode::kOutOfRange) return s;
    // The revision was compacted away: read afresh and watch from there.
    absl::StatusOr<Read> again = RangeMany(full_keys, this->timeout());
    if (!again.ok()) return again.status();
    *read = *std::move(again);
  }
}

absl::StatusOr<std::vector<std::string>> EtcdStore::MultiGet(const std::vector<std::string>& keys,
                                                             Milliseconds timeout) {
  if (keys.empty()) return std::vector<std::string>();
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& k : keys) full.push_back(Full(k));
  const Deadline deadline = DeadlineIn(timeout);
  // The wait's timeout bounds the waiting, not the request: a short one
  // (even 1 ms) still reads what is there.
  absl::StatusOr<Read> read = RangeMany(full, this->timeout());
  if (!read.ok()) return read.status();
  absl::Status present = WaitPresent(full, &*read, Left(deadline));
  if (!present.ok()) {
    if (present.code() == absl::StatusCode::kDeadlineExceeded) {
      // Name the timeout the caller gave, not what was left of it.
      store_ops::Map have;
      for (const auto& [k, v] : read->values) have.emplace(k.substr(prefix_.size()), v);
      return store_ops::WaitTimeout(have, keys, timeout);
    }
    return present;
  }
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const std::string& k : full) values.push_back(read->values[k]);
  return values;
}

absl::StatusOr<std::string> EtcdStore::Get(absl::string_view key, Milliseconds timeout) {
  absl::StatusOr<std::vector<std::string>> v = MultiGet({std::string(key)}, timeout);
  if (!v.ok()) return v.status();
  return std::move(v->front());
}

absl::Status EtcdStore::Wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  return MultiGet(keys, timeout).status();
}

absl::StatusOr<bool> EtcdStore::Check(const std::vector<std::string>& keys) {
  std::vector<std::string> full;
  for (const std::string& k : keys) full.push_back(Full(k));
  absl::StatusOr<Read> read = RangeMany(full, timeout());
  if (!read.ok()) return read.status();
  for (const std::string& k : full) {
    if (read->values.count(k) == 0) return false;
  }
  return true;
}

absl::StatusOr<std::string> EtcdStore::ReadModifyWrite(
    absl::string_view key, const std::function<absl::StatusOr<std::string>(store_ops::Map&)>& change) {
  const std::string full = Full(key);
  const std::string k(key);
  for (int attempt = 0; attempt < kMaxWriteRetries; ++attempt) {
    absl::StatusOr<Read> read = RangeMany({full}, timeout());
    if (!read.ok()) return read.status();
    store_ops::Map data;
    const bool existed = read->values.count(full) != 0;
    if (existed) data[k] = read->values[full];
    absl::StatusOr<std::string> answer = change(data);
    if (!answer.ok()) return answer;
    const bool exists = data.count(k) != 0;
    if (exists == existed && (!exists || data[k] == read->values[full])) return answer;  // Nothing to write.
    json compare = existed ? json{{"key", EtcdClient::Encode(full)},
                                  {"target", "MOD"},
                                  {"result", "EQUAL"},
                                  {"mod_revision", std::to_string(read->mod_revision[full])}}
                           : json{{"key", EtcdClient::Encode(full)},
                                  {"target", "CREATE"},
                                  {"result", "EQUAL"},
                                  {"create_revision", "0"}};
    json put = {{"request_put", {{"key", EtcdClient::Encode(full)}, {"value", EtcdClient::Encode(data[k])}}}};
    json txn = {{"compare", json::array({compare})}, {"success", json::array({put})}};
    absl::StatusOr<json> done = client_->Call("/v3/kv/txn", txn, timeout());
    if (!done.ok()) return done.status();
    if (done->value("succeeded", false)) return answer;
    // Another client wrote the key first: read it again.
  }
  return absl::AbortedError(absl::StrCat("EtcdStore: key ", key, " kept changing under ", kMaxWriteRetries,
                                         " attempts to update it; too many clients write it at once"));
}

absl::StatusOr<int64_t> EtcdStore::Add(absl::string_view key, int64_t delta) {
  int64_t result = 0;
  absl::StatusOr<std::string> s = ReadModifyWrite(key, [&](store_ops::Map& data) -> absl::StatusOr<std::string> {
    absl::StatusOr<int64_t> v = store_ops::Add(data, key, delta);
    if (!v.ok()) return v.status();
    result = *v;
    return std::string();
  });
  if (!s.ok()) return s.status();
  return result;
}

absl::StatusOr<std::string> EtcdStore::CompareSet(absl::string_view key, absl::string_view expected,
                                                  absl::string_view desired) {
  return ReadModifyWrite(key, [&](store_ops::Map& data) -> absl::StatusOr<std::string> {
    return store_ops::CompareSet(data, key, expected, desired);
  });
}

absl::StatusOr<bool> EtcdStore::DeleteKey(absl::string_view key) {
  absl::StatusOr<json> answer =
      client_->Call("/v3/kv/deleterange", json{{"key", EtcdClient::Encode(Full(key))}}, timeout());
  if (!answer.ok()) return answer.status();
  return EtcdClient::Int(*answer, "deleted") > 0;
}

absl::StatusOr<int64_t> EtcdStore::NumKeys() {
  json range = {{"key", EtcdClient::Encode(prefix_)},
                {"range_end", EtcdClient::Encode(EtcdPrefixEnd(prefix_))},
                {"count_only", true}};
  absl::StatusOr<json> answer = client_->Call("/v3/kv/range", range, timeout());
  if (!answer.ok()) return answer.status();
  return EtcdClient::Int(*answer, "count");
}

absl::StatusOr<int64_t> EtcdStore::GrantLease(std::chrono::seconds ttl) {
  absl::StatusOr<json> answer = client_->Call("/v3/lease/grant", json{{"TTL", std::to_string(ttl.count())}}, timeout());
  if (!answer.ok()) return answer.status();
  const int64_t id = EtcdClient::Int(*answer, "ID");
  if (id == 0) return absl::UnknownError(absl::StrCat("etcd at ", where(), " granted a lease without an ID"));
  return id;
}

absl::StatusOr<int64_t> EtcdStore::KeepAliveOnce(int64_t lease) {
  // A stream of one request: the gateway answers it once and ends.
  int64_t ttl = -1;
  absl::Status s =
      client_->Stream("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}, timeout(), [&](const json& result) {
        ttl = EtcdClient::Int(result, "TTL");
        return false;
      });
  if (!s.ok()) return s;
  return ttl;
}

absl::Status EtcdStore::RevokeLease(int64_t lease) {
  return client_->Call("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}, timeout()).status();
}

absl::StatusOr<std::map<std::string, std::string>> EtcdStore::ListPrefix(absl::string_view sub, int64_t* revision) {
  const std::string from = Full(sub);
  json range = {{"key", EtcdClient::Encode(from)}, {"range_end", EtcdClient::Encode(EtcdPrefixEnd(from))}};
  absl::StatusOr<json> answer = client_->Call("/v3/kv/range", range, timeout());
  if (!answer.ok()) return answer.status();
  if (revision != nullptr) *revision = EtcdClient::Int((*answer)["header"], "revision");
  std::map<std::string, std::string> out;
  if (!answer->contains("kvs")) return out;
  for (const json& kv : (*answer)["kvs"]) {
    absl::StatusOr<std::string> k = EtcdClient::Decode(kv["key"]);
    absl::StatusOr<std::string> v = EtcdClient::Decode(kv.contains("value") ? kv["value"] : json());
    if (!k.ok()) return k.status();
    if (!v.ok()) return v.status();
    out[k->substr(prefix_.size())] = *std::move(v);
  }
  return out;
}

absl::Status EtcdStore::WatchPrefix(absl::string_view sub, int64_t after_revision, Milliseconds timeout,
                                    const std::function<bool(const std::vector<EtcdEvent>&)>& on_events,
                                    const std::atomic<bool>* cancel) {
  const std::string from = Full(sub);
  json create = {{"key", EtcdClient::Encode(from)},
                 {"range_end", EtcdClient::Encode(EtcdPrefixEnd(from))},
                 {"start_revision", std::to_string(after_revision + 1)}};
  bool cancelled_by_server = false;
  absl::Status s = client_->Stream(
      "/v3/watch", json{{"create_request", create}}, timeout,
      [&](const json& result) {
        if (result.value("canceled", false)) {
          cancelled_by_server = true;
          return false;
        }
        std::vector<EtcdEvent> events = ParseEvents(result);
        if (events.empty()) return true;
        for (EtcdEvent& e : events) e.key = e.key.substr(prefix_.size());
        return on_events(events);
      },
      cancel);
  if (cancelled_by_server) {
    return absl::AbortedError(absl::StrCat("etcd at ", where(), " cancelled the watch on ", from,
                                           " (compacted past revision ", after_revision + 1, "?)"));
  }
  return s;
}

}  // namespace lockstep
