#include "tools/launch/rendezvous.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "collectives/bootstrap/local_launch.h"
#include "collectives/transport/tcp/socket.h"
#include "core/status.h"

namespace lockstep {
namespace launch {
namespace {

using std::chrono::milliseconds;

std::string AttemptKey(int attempt, absl::string_view what) { return absl::StrCat("a", attempt, "/", what); }

std::string Seconds(milliseconds ms) { return absl::StrCat(static_cast<double>(ms.count()) / 1000.0, " s"); }

// Store errors during the rendezvous, with what we were doing.
absl::Status StoreError(int attempt, absl::string_view doing, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat("rendezvous (attempt ", attempt, "): ", doing, ": ", s.message()));
}

}  // namespace

absl::StatusOr<int> PickFreePort(const std::string& host) {
  int port = 0;
  absl::StatusOr<Fd> fd = Listen(host, 0, &port);
  if (!fd.ok()) {
    return absl::Status(fd.status().code(),
                        absl::StrCat("choosing MASTER_PORT for the workers on ", host, ": ", fd.status().message()));
  }
  return port;  // Closed here: rank 0's store binds it next.
}

std::string EncodeNodeInfo(const NodeInfo& node, const std::string& nonce) {
  return absl::StrCat(node.agent_id, "\t", node.host, "\t", node.hostname, "\t", node.local_world_size, "\t", nonce);
}

absl::StatusOr<NodeInfo> DecodeNodeInfo(const std::string& text, std::string* nonce) {
  std::vector<std::string> f = absl::StrSplit(text, '\t');
  NodeInfo node;
  if (f.size() != 5 || !absl::SimpleAtoi(f[0], &node.agent_id) || !absl::SimpleAtoi(f[3], &node.local_world_size) ||
      node.local_world_size < 1) {
    return absl::DataLossError(absl::StrCat("rendezvous: a node's record '", absl::CHexEscape(text),
                                            "' is malformed; do two different launchers share this "
                                            "rendezvous endpoint and run id?"));
  }
  node.host = f[1];
  node.hostname = f[2];
  if (nonce != nullptr) *nonce = f[4];
  return node;
}

Rendezvous::Rendezvous(Store* store, RendezvousOptions options)
    : store_(store), options_(std::move(options)), nonce_(RandomStoreToken()) {
  if (options_.backend == "static") agent_id_ = options_.node_rank;
}

NodeInfo Rendezvous::Self() const {
  NodeInfo self;
  self.agent_id = agent_id_;
  self.host = options_.host;
  self.hostname = options_.hostname;
  self.local_world_size = options_.local_world_size;
  return self;
}

absl::StatusOr<std::vector<NodeInfo>> Rendezvous::JoinStatic(int attempt) {
  const int n = options_.max_nodes;
  const std::string mine = EncodeNodeInfo(Self(), nonce_);
  const std::string key = AttemptKey(attempt, absl::StrCat("node/", options_.node_rank));
  absl::StatusOr<std::string> now = store_->CompareSet(key, "", mine);
  if (!now.ok()) return StoreError(attempt, "claiming node rank", now.status());
  if (*now != mine) {
    absl::StatusOr<NodeInfo> other = DecodeNodeInfo(*now, nullptr);
    return absl::AlreadyExistsError(absl::StrCat("rendezvous (static, attempt ", attempt, "): node rank ",
                                                 options_.node_rank, " is already taken by host ",
                                                 other.ok() ? other->hostname + " (" + other->host + ")" : "?",
                                                 "; give every node its own --node_rank in 0..", n - 1));
  }
  std::vector<std::string> keys;
  for (int r = 0; r < n; ++r) keys.push_back(AttemptKey(attempt, absl::StrCat("node/", r)));
  absl::Status waited = store_->Wait(keys, options_.join_timeout);
  if (absl::IsDeadlineExceeded(waited)) {
    std::vector<int> missing;
    for (int r = 0; r < n; ++r) {
      absl::StatusOr<bool> there = store_->Check({keys[static_cast<size_t>(r)]});
      if (there.ok() && !*there) missing.push_back(r);
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "rendezvous (static, attempt ", attempt, "): only ", n - static_cast<int>(missing.size()), " of ", n,
        " nodes joined within ", Seconds(options_.join_timeout), " (missing node ranks: ", absl::StrJoin(missing, ", "),
        "); start lockstep-run on every node with the same --nnodes, --master_addr and --master_port, "
        "or raise --rdzv_conf timeout=SECONDS"));
  }
  if (!waited.ok()) return StoreError(attempt, "waiting for the other nodes", waited);
  std::vector<NodeInfo> nodes;
  for (const std::string& k : keys) {
    absl::StatusOr<std::string> value = store_->Get(k, options_.join_timeout);
    if (!value.ok()) return StoreError(attempt, "reading the nodes", value.status());
    LOCKSTEP_ASSIGN_OR_RETURN(NodeInfo node, DecodeNodeInfo(*value, nullptr));
    nodes.push_back(std::move(node));
  }
  return nodes;
}

absl::StatusOr<std::vector<NodeInfo>> Rendezvous::JoinElasticRound(int attempt, SteadyClock::time_point deadline,
                                                                   bool* late) {
  *late = false;
  const std::string joined_key = AttemptKey(attempt, "joined");
  const std::string closed_key = AttemptKey(attempt, "closed");
  absl::StatusOr<int64_t> arrived = store_->Add(joined_key, 1);
  if (!arrived.ok()) return StoreError(attempt, "joining", arrived.status());
  const int64_t index = *arrived - 1;
  absl::Status set = store_->Set(AttemptKey(attempt, absl::StrCat("member/", index)), EncodeNodeInfo(Self(), nonce_));
  if (!set.ok()) return StoreError(attempt, "joining", set);

  std::optional<SteadyClock::time_point> window_closes;
  int64_t joined = *arrived;
  for (;;) {
    absl::StatusOr<bool> closed = store_->Check({closed_key});
    if (!closed.ok()) return StoreError(attempt, "waiting for the group to form", closed.status());
    if (*closed) break;
    absl::StatusOr<int64_t> count = store_->Add(joined_key, 0);
    if (!count.ok()) return StoreError(attempt, "counting the nodes", count.status());
    joined = *count;
    const auto now = SteadyClock::now();
    if (joined >= options_.max_nodes) {
      absl::StatusOr<std::string> r = store_->CompareSet(closed_key, "", absl::StrCat(options_.max_nodes));
      if (!r.ok()) return StoreError(attempt, "closing the group", r.status());
      LOCKSTEP_RETURN_IF_ERROR(store_->Set("latest", absl::StrCat(attempt)));
      continue;
    }
    if (joined >= options_.min_nodes) {
      if (!window_closes) window_closes = now + options_.last_call_timeout;
      if (now >= *window_closes) {
        absl::StatusOr<std::string> r = store_->CompareSet(closed_key, "", absl::StrCat(joined));
        if (!r.ok()) return StoreError(attempt, "closing the group", r.status());
        LOCKSTEP_RETURN_IF_ERROR(store_->Set("latest", absl::StrCat(attempt)));
        continue;
      }
    }
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("rendezvous (c10d, attempt ", attempt, "): only ", joined, " of at least ", options_.min_nodes,
                       " nodes joined within ", Seconds(options_.join_timeout),
                       "; start lockstep-run on the other nodes with the same --rdzv_endpoint and --rdzv_id, "
                       "or raise --rdzv_conf timeout=SECONDS"));
    }
    auto wait_until = std::min(deadline, now + options_.poll_interval);
    if (window_closes) wait_until = std::min(wait_until, *window_closes);
    const auto wait = std::chrono::ceil<milliseconds>(wait_until - now);
    absl::Status s = store_->Wait({closed_key}, std::max(wait, milliseconds(1)));
    if (!s.ok() && !absl::IsDeadlineExceeded(s)) return StoreError(attempt, "waiting for the group", s);
  }
  absl::StatusOr<std::string> size_text = store_->Get(closed_key, options_.join_timeout);
  if (!size_text.ok()) return StoreError(attempt, "reading the group size", size_text.status());
  int64_t size = 0;
  if (!absl::SimpleAtoi(*size_text, &size) || size < 1) {
    return absl::DataLossError(absl::StrCat("rendezvous (attempt ", attempt, "): bad group size '", *size_text, "'"));
  }
  if (index >= size) {
    *late = true;
    return std::vector<NodeInfo>();
  }
  std::vector<NodeInfo> nodes;
  for (int64_t i = 0; i < size; ++i) {
    absl::StatusOr<std::string> value =
        store_->Get(AttemptKey(attempt, absl::StrCat("member/", i)), options_.join_timeout);
    if (!value.ok()) return StoreError(attempt, "reading the members", value.status());
    LOCKSTEP_ASSIGN_OR_RETURN(NodeInfo node, DecodeNodeInfo(*value, nullptr));
    nodes.push_back(std::move(node));
  }
  // Arrival order: a node that was number 2 stays before number 5 in every
  // attempt, so node ranks stay as they were while the members do.
  std::sort(nodes.begin(), nodes.end(), [](const NodeInfo& a, const NodeInfo& b) { return a.agent_id < b.agent_id; });
  return nodes;
}

absl::StatusOr<std::vector<NodeInfo>> Rendezvous::JoinElastic(int* attempt) {
  if (agent_id_ < 0) {
    absl::StatusOr<int64_t> id = store_->Add("agent_counter", 1);
    if (!id.ok()) return StoreError(*attempt, "taking an arrival number", id.status());
    agent_id_ = *id - 1;
    // A node that comes to a running job starts at the latest round.
    absl::StatusOr<bool> running = store_->Check({"latest"});
    if (!running.ok()) return StoreError(*attempt, "reading the latest round", running.status());
    if (*running) {
      absl::StatusOr<std::string> latest = store_->Get("latest", options_.join_timeout);
      int round = 0;
      if (latest.ok() && absl::SimpleAtoi(*latest, &round) && round > *attempt) *attempt = round;
    }
  }
  const auto deadline = SteadyClock::now() + options_.join_timeout;
  for (;;) {
    bool late = false;
    LOCKSTEP_ASSIGN_OR_RETURN(std::vector<NodeInfo> nodes, JoinElasticRound(*attempt, deadline, &late));
    if (!late) return nodes;
    if (options_.admit_late_nodes) {
      // The group of this round closed without us: tell its members (they
      // re-form the group to take us in, torchrun's scale-up) and wait for
      // the next round.
      absl::StatusOr<int64_t> waiting = store_->Add(AttemptKey(*attempt, "waiting"), 1);
      if (!waiting.ok()) return StoreError(*attempt, "announcing this node", waiting.status());
    }
    if (!options_.admit_late_nodes || SteadyClock::now() >= deadline) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rendezvous (c10d, attempt ", *attempt, "): this node came after the group closed", " (--nnodes ",
          options_.min_nodes, ":", options_.max_nodes, ") and no new round formed within ",
          Seconds(options_.join_timeout), "; start every node within last_call_timeout (",
          Seconds(options_.last_call_timeout), ") of the first, or raise --rdzv_conf last_call_timeout=SECONDS"));
    }
    ++*attempt;
  }
}

absl::StatusOr<GroupAssignment> Rendezvous::Join(int attempt, const PortChooser& choose_port) {
  std::vector<NodeInfo> nodes;
  if (options_.backend == "static") {
    LOCKSTEP_ASSIGN_OR_RETURN(nodes, JoinStatic(attempt));
  } else {
    LOCKSTEP_ASSIGN_OR_RETURN(nodes, JoinElastic(&attempt));
  }
  GroupAssignment group;
  group.attempt = attempt;
  group.group_world_size = static_cast<int>(nodes.size());
  group.group_rank = -1;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].agent_id == agent_id_) {
      group.group_rank = static_cast<int>(i);
      group.rank_offset = group.world_size;
    }
    group.world_size += nodes[i].local_world_size;
  }
  if (group.group_rank < 0) {
    return absl::InternalError(absl::StrCat("rendezvous (attempt ", attempt, "): this agent (id ", agent_id_,
                                            ") is missing from its own group"));
  }
  group.nodes = std::move(nodes);
  const std::string master_key = AttemptKey(attempt, "master");
  std::string master;
  if (group.group_rank == 0) {
    LOCKSTEP_ASSIGN_OR_RETURN(int port, choose_port(options_.host));
    master = absl::StrCat(options_.host, "\t", port, "\t", RandomStoreToken());
    absl::Status s = store_->Set(master_key, master);
    if (!s.ok()) return StoreError(attempt, "publishing MASTER_ADDR/MASTER_PORT", s);
  } else {
    absl::StatusOr<std::string> value = store_->Get(master_key, options_.join_timeout);
    if (!value.ok()) return StoreError(attempt, "waiting for node rank 0's MASTER_ADDR/MASTER_PORT", value.status());
    master = *value;
  }
  std::vector<std::string> f = absl::StrSplit(master, '\t');
  if (f.size() != 3 || !absl::SimpleAtoi(f[1], &group.master_port)) {
    return absl::DataLossError(absl::StrCat("rendezvous (attempt ", attempt, "): bad master record"));
  }
  group.master_addr = f[0];
  group.worker_token = WorkerToken(options_.join_token, attempt, f[2]);
  return group;
}

std::string Rendezvous::WorkerToken(const std::string& join_token, int attempt, const std::string& nonce) const {
  if (join_token.empty()) return nonce;
  const std::string message = absl::StrCat("lockstep-run workers\n", attempt, "\n", nonce);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), join_token.data(), static_cast<int>(join_token.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &length);
  // 128 bits, as RandomStoreToken's.
  std::string hex;
  for (unsigned int i = 0; i < 16 && i < length; ++i) absl::StrAppend(&hex, absl::Hex(mac[i], absl::kZeroPad2));
  return hex;
}

}  // namespace launch
}  // namespace lockstep
