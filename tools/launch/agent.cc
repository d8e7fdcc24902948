#include "tools/launch/agent.h"

#include <set>

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/bootstrap/local_launch.h"
#include "collectives/store/etcd/etcd_store.h"
#include "collectives/store/prefix_store.h"
#include "collectives/store/tcp_store.h"
#include "collectives/transport/tcp/address.h"
#include "collectives/transport/tcp/socket.h"
#include "core/status.h"
#include "tools/launch/elastic_watch.h"
#include "tools/launch/etcd_liveness.h"
#include "tools/launch/group_state.h"
#include "tools/launch/rendezvous.h"
#include "tools/launch/worker_group.h"

namespace lockstep {
namespace launch {
namespace {

using std::chrono::milliseconds;

void Say(const std::string& text) { std::cerr << "[lockstep-run] " << text << std::endl; }

// torchrun's behaviour, said aloud: a job of several nodes without a join
// token is open to whoever reaches its endpoint.
std::string OpenJobWarning(const std::string& where) {
  return absl::StrCat("warning: this job has no join token, so any host that reaches the rendezvous endpoint ", where,
                      " can join it, read its workers' secret and end it; give every agent the same token ",
                      "(LOCKSTEP_RDZV_TOKEN or --rdzv_conf join_token_file=PATH), and LOCKSTEP_REQUIRE_TOKEN=1 to "
                      "refuse to start without one");
}

std::string Hostname() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

milliseconds FromSeconds(double s) { return milliseconds(static_cast<int64_t>(s * 1000)); }

bool IsLocalHost(const std::string& host) {
  if (IsLoopbackAddress(host) || host == Hostname()) return true;
  for (const InterfaceAddress& a : LocalAddresses()) {
    if (a.address == host) return true;
  }
  return false;
}

// The rendezvous store: hosted here (a server in this process plus a
// client), a client of another agent's, or etcd.
struct RendezvousStore {
  std::shared_ptr<TcpStore> tcp;
  // etcd: the run's keys (the prefix holds --rdzv_id); nobody hosts it.
  std::shared_ptr<EtcdStore> etcd;
  bool hosting = false;
  std::string where;  // host:port, for messages.
  std::string token;  // The join token in force ("" = none).
};

absl::StatusOr<RendezvousStore> OpenEtcdStore(const AgentOptions& o) {
  const RendezvousSettings& r = o.rendezvous;
  RendezvousStore rs;
  rs.where = absl::StrJoin(r.etcd_endpoints, ",");
  rs.token = r.token;
  // As with our own store: one node and no token of the user's: a random
  // one, so the workers' secret cannot be read from etcd.
  if (o.flags.max_nodes == 1 && rs.token.empty()) rs.token = RandomStoreToken();
  EtcdClientOptions c;
  c.endpoints = r.etcd_endpoints;
  c.protocol = r.etcd_protocol;
  c.ca_cert = r.etcd_ca_cert;
  c.client_cert = r.etcd_cert;
  c.client_key = r.etcd_key;
  c.connect_timeout = std::min(r.read_timeout, milliseconds(10000));
  absl::StatusOr<std::unique_ptr<EtcdStore>> store =
      EtcdStore::Create(c, absl::StrCat(r.etcd_prefix, "/", o.flags.rdzv_id, "/"), r.read_timeout);
  if (!store.ok()) {
    return absl::Status(store.status().code(), absl::StrCat("lockstep-run: cannot use etcd at ", rs.where,
                                                            " for the rendezvous: ", store.status().message()));
  }
  rs.etcd = *std::move(store);
  return rs;
}

absl::StatusOr<RendezvousStore> OpenRendezvousStore(const AgentOptions& o) {
  const RendezvousSettings& r = o.rendezvous;
  if (r.backend == "etcd") return OpenEtcdStore(o);
  RendezvousStore rs;
  rs.where = HostPort(r.host, r.port);
  bool host_it;
  if (r.is_host.has_value()) {
    host_it = *r.is_host;
  } else if (r.backend == "static") {
    host_it = o.flags.node_rank == 0;
  } else {
    host_it = IsLocalHost(r.host);
  }
  TcpStoreOptions options;
  options.host = r.host;
  options.port = r.port;
  options.token = r.token;
  // A job of one node has one agent, this one: without a token of the
  // user's it gets a random one that nobody else knows, so no other local
  // user can read the rendezvous store (which leads to the workers' store
  // and secret) or write a failure into it.
  if (host_it && o.flags.max_nodes == 1 && options.token.empty()) options.token = RandomStoreToken();
  rs.token = options.token;
  if (host_it) {
    options.is_server = true;
    options.timeout = r.read_timeout;
    absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Create(options);
    if (store.ok()) {
      rs.tcp = *std::move(store);
      rs.hosting = true;
      rs.where = HostPort(r.host, rs.tcp->port());
      return rs;
    }
    // c10d: another agent on this host may have bound it first; join it.
    if (r.backend == "static" || r.is_host.value_or(false)) {
      return absl::UnavailableError(absl::StrCat(
          "lockstep-run: cannot host the rendezvous store on port ", r.port, " (", rs.where,
          "): ", store.status().message(), "; port ", r.port, " is probably in use: stop what holds it or choose ",
          r.backend == "static" ? "another --master_port" : "another port in --rdzv_endpoint",
          " (the same on every node)"));
    }
  }
  options.is_server = false;
  options.timeout = r.join_timeout;
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Create(options);
  if (!store.ok()) {
    const std::string message(store.status().message());
    if (absl::StrContains(message, "token")) {
      return absl::PermissionDeniedError(absl::StrCat(
          "lockstep-run: the rendezvous store at ", rs.where, " refused this agent's join token (", message,
          "); give every agent the same token (LOCKSTEP_RDZV_TOKEN, --rdzv_conf join_token_file=PATH)"));
    }
    return absl::Status(store.status().code(),
                        absl::StrCat("lockstep-run: cannot reach the rendezvous store at ", rs.where, " within ",
                                     r.join_timeout.count() / 1000.0, " s (", message, "); start node rank 0 ",
                                     "(the store's host) with the same endpoint, check the address and firewall, "
                                     "or raise --rdzv_conf timeout=SECONDS"));
  }
  rs.tcp = *std::move(store);
  // A fresh request must not fail for want of a reconnection, but a store
  // that vanished must be noticed well before the join timeout.
  rs.tcp->set_timeout(r.read_timeout);
  return rs;
}

absl::StatusOr<std::string> ChooseNodeAddress(const AgentOptions& o) {
  AddressSelection selection;
  selection.master_addr = o.rendezvous.host;
  // Nodes on other hosts must reach us, unless the rendezvous is on loopback
  // (then every node is on this host).
  selection.spans_hosts = o.flags.max_nodes > 1 && !IsLoopbackAddress(o.rendezvous.host);
  ApplyAddressEnvironment(&selection);
  return ChooseLocalAddress(selection);
}

absl::StatusOr<std::string> MakeRunLogDir(const LaunchFlags& flags) {
  const bool any_redirect = flags.redirects.all != 0 || !flags.redirects.per_rank.empty() || flags.tee.all != 0 ||
                            !flags.tee.per_rank.empty();
  std::string base = flags.log_dir;
  if (base.empty()) {
    if (!any_redirect) return std::string();
    // torchrun: redirects without --log_dir go to a fresh temporary directory.
    const char* tmp = getenv("TMPDIR");
    std::string templ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/torchelastic_XXXXXX");
    if (mkdtemp(templ.data()) == nullptr) {
      return absl::PermissionDeniedError(
          absl::StrCat("lockstep-run: cannot create a log directory ", templ, "; give a writable --log_dir"));
    }
    base = templ;
  }
  return absl::StrCat(base, "/", flags.rdzv_id, "_", RandomStoreToken().substr(0, 8));
}

enum class Outcome { kSucceeded, kFailed, kInterrupted, kNodesWaiting };

struct AttemptResult {
  Outcome outcome = Outcome::kFailed;
  FailureRecord failure;
  // An agent lost about when `failure` happened (the likely cause of it).
  std::optional<FailureRecord> cause;
  int signal = 0;
  bool store_gone = false;  // Nothing more can be said through the store.
  int64_t nodes_waiting = 0;
};

class Agent {
 public:
  Agent(const AgentOptions& o, SignalForwarder* forwarder) : o_(o), forwarder_(forwarder) {}
  int Run();

 private:
  AttemptResult Monitor(const GroupAssignment& group, GroupState& state, WorkerGroup& workers);
  FailureRecord AgentFailure(const GroupAssignment& group, const std::string& what, bool restartable) const;
  FailureRecord StoreGone(const absl::Status& s) const;
  FailureRecord WorkerFailure(const GroupAssignment& group, WorkerGroup& workers, const WorkerExit& e) const;
  // The store stopped answering: the failure is a local worker's that has
  // already ended, if any (its peers probably vanished with the store's
  // host), with the lost store as the likely cause; else the store itself.
  AttemptResult StoreGoneResult(const GroupAssignment& group, WorkerGroup* workers, const absl::Status& s) const;
  // After a failure: waits (up to the heartbeat timeout from `since`) for
  // the other agents to say they saw it; one that does not is lost, and is
  // named as the likely cause of a worker's failure.
  void FindLostAgents(const GroupAssignment& group, GroupState& state, SteadyClock::time_point since,
                      AttemptResult* result) const;
  // Says goodbye; the store's host waits for the others first.
  void Leave(GroupState& state, const FailureRecord* failure);

  // etcd: the run is over (its key `ended`); says why, for a late agent.
  void MarkRunEnded(Store* run_store, const std::string& why);

  // --fault_tolerant: the workers' store for this attempt (node 0 serves
  // it, so that no worker's death takes it along) and what the agent
  // follows of their elastic group.
  absl::Status OpenWorkerStore(const GroupAssignment& group, int restarts);
  // A local worker ended badly: restarted alone when its budget allows
  // (true), else the attempt fails as without --fault_tolerant (false).
  absl::StatusOr<bool> RestartAlone(const GroupAssignment& group, WorkerGroup& workers, const WorkerExit& e);
  void SayElasticLines();

  const AgentOptions& o_;
  SignalForwarder* forwarder_;
  RendezvousStore store_;
  std::shared_ptr<Store> worker_store_;     // --fault_tolerant, this attempt's prefix.
  std::unique_ptr<ElasticWatch> watch_;     // --fault_tolerant.
  std::vector<int> members_;                // --fault_tolerant: each local worker's member id.
  std::vector<int> restarts_left_;          // --fault_tolerant: each local worker's.
  std::set<int64_t> lost_nodes_;            // --fault_tolerant: agents found lost and gone on without.
  std::unique_ptr<EtcdLiveness> liveness_;  // etcd only.
  std::string address_;
  std::string hostname_ = Hostname();
};

FailureRecord Agent::AgentFailure(const GroupAssignment& group, const std::string& what, bool restartable) const {
  FailureRecord r;
  r.group_rank = group.group_rank;
  r.hostname = hostname_;
  r.host = address_;
  r.what = what;
  r.restartable = restartable;
  return r;
}

FailureRecord Agent::StoreGone(const absl::Status& s) const {
  FailureRecord r;
  if (store_.etcd != nullptr) {
    r.hostname = store_.where;
    r.host = store_.where;
    r.what = absl::StrCat("etcd at ", store_.where, " stopped answering (", s.message(),
                          "); the rendezvous cannot go on without it: check etcd's health (etcdctl endpoint health)");
    r.restartable = false;
    return r;
  }
  // static: node rank 0 hosts the store (unless rdzv_conf is_host says otherwise).
  if (o_.rendezvous.backend == "static" && !o_.rendezvous.is_host.has_value()) r.group_rank = 0;
  r.hostname = o_.rendezvous.host;
  r.host = store_.where;
  r.what = absl::StrCat("the rendezvous store at ", store_.where, " stopped answering (", s.message(),
                        "); the agent that hosts it (node rank 0 with static) has probably died");
  r.restartable = false;
  return r;
}

FailureRecord Agent::WorkerFailure(const GroupAssignment& group, WorkerGroup& workers, const WorkerExit& e) const {
  workers.WaitOutput(e.local_rank, DeadlineIn(milliseconds(1000)));
  FailureRecord r;
  r.rank = group.rank_offset + e.local_rank;
  r.local_rank = e.local_rank;
  r.group_rank = group.group_rank;
  r.hostname = hostname_;
  r.host = address_;
  r.what = e.status.ToString();
  r.exit_code = e.status.exit_code();
  r.signal = e.status.signal();
  r.tail = workers.Tail(e.local_rank);
  return r;
}

AttemptResult Agent::StoreGoneResult(const GroupAssignment& group, WorkerGroup* workers, const absl::Status& s) const {
  AttemptResult result;
  result.store_gone = true;
  result.failure = StoreGone(s);
  if (workers == nullptr) return result;
  for (;;) {
    absl::StatusOr<std::optional<WorkerExit>> ended = workers->WaitNext(SteadyClock::now());
    if (!ended.ok() || !ended->has_value()) break;
    if (!(*ended)->status.success()) {
      result.cause = result.failure;
      result.failure = WorkerFailure(group, *workers, **ended);
      result.failure.restartable = false;
      break;
    }
  }
  return result;
}

void Agent::FindLostAgents(const GroupAssignment& group, GroupState& state, SteadyClock::time_point since,
                           AttemptResult* result) const {
  const milliseconds timeout = o_.rendezvous.heartbeat_timeout;
  // An agent another one already found lost will not answer either.
  if (result->failure.agent_lost) state.MarkLost(result->failure.group_rank);
  const auto left = std::chrono::ceil<milliseconds>(since + timeout - SteadyClock::now());
  absl::StatusOr<std::vector<NodeInfo>> silent = state.WaitOthersLeft(std::max(left, milliseconds(1)));
  if (!silent.ok()) {
    // The store went away meanwhile: its host is the likely cause.
    result->store_gone = true;
    result->failure.restartable = false;
    if (!result->cause.has_value()) result->cause = StoreGone(silent.status());
    return;
  }
  if (silent->empty() || result->cause.has_value()) return;
  const NodeInfo& node = silent->front();
  // The failure already names this agent: nothing to add.
  if (result->failure.agent_lost && result->failure.host == node.host && result->failure.hostname == node.hostname) {
    return;
  }
  FailureRecord c;
  c.group_rank = 0;
  for (const NodeInfo& n : group.nodes) {
    if (n.agent_id == node.agent_id) break;
    ++c.group_rank;
  }
  c.hostname = node.hostname;
  c.host = node.host;
  c.what = absl::StrCat("it did not answer within ", timeout.count() / 1000.0, " s after attempt ", group.attempt,
                        " failed (rdzv_conf heartbeat_timeout); it died (its workers with it) or its host is "
                        "unreachable");
  c.agent_lost = true;
  result->cause = c;
}

void Agent::Leave(GroupState& state, const FailureRecord* failure) {
  if (failure != nullptr && failure->agent_lost) state.MarkLost(failure->group_rank);
  (void)state.MarkExited();
  if (store_.hosting) {
    // The others may stop their workers (stop_grace) and wait for a lost
    // agent's answer (heartbeat_timeout) before they leave.
    const milliseconds bound = SaturatingAdd(
        SaturatingAdd(SaturatingAdd(o_.rendezvous.heartbeat_timeout, o_.rendezvous.heartbeat_timeout), o_.stop_grace),
        FromSeconds(o_.flags.monitor_interval_s));
    absl::Status s = state.WaitAllExited(bound);
    if (!s.ok()) Say("not every agent said goodbye before this one closes the rendezvous store");
  }
}

AttemptResult Agent::Monitor(const GroupAssignment& group, GroupState& state, WorkerGroup& workers) {
  const milliseconds tick = std::max(
      milliseconds(10), std::min(FromSeconds(o_.flags.monitor_interval_s), o_.rendezvous.heartbeat_timeout / 3));
  AttemptResult result;
  bool done_marked = false;
  const bool may_grow = o_.rendezvous.backend != "static" && group.group_world_size < o_.flags.max_nodes;
  auto next_check = SteadyClock::now();
  for (;;) {
    forwarder_->SetTargets(workers.RunningGroups());
    if (watch_ != nullptr && watch_->pending()) SayElasticLines();
    if (const int sig = forwarder_->received(); sig != 0) {
      result.outcome = Outcome::kInterrupted;
      result.signal = sig;
      result.failure = AgentFailure(group, absl::StrCat("interrupted by signal ", sig, " (", strsignal(sig), ")"),
                                    /*restartable=*/false);
      (void)state.PublishFailure(result.failure);
      return result;
    }
    const auto now = SteadyClock::now();
    if (now >= next_check) {
      // While a loss or a replacement is pending its line is due soon.
      next_check = now + (watch_ != nullptr && watch_->pending() ? std::min(tick, milliseconds(10)) : tick);
      absl::Status beat = state.Heartbeat();
      absl::StatusOr<std::optional<FailureRecord>> failure =
          beat.ok() ? state.Failure() : absl::StatusOr<std::optional<FailureRecord>>(beat);
      if (!failure.ok()) {
        return StoreGoneResult(group, &workers, failure.status());
      }
      if (failure->has_value()) {
        result.failure = **failure;
        return result;
      }
      if (may_grow) {
        absl::StatusOr<int64_t> waiting = state.NodesWaiting();
        if (!waiting.ok()) {
          return StoreGoneResult(group, &workers, waiting.status());
        }
        if (*waiting > 0) {
          result.outcome = Outcome::kNodesWaiting;
          result.nodes_waiting = *waiting;
          return result;
        }
      }
      absl::StatusOr<std::optional<NodeInfo>> lost = state.StaleAgent(o_.rendezvous.heartbeat_timeout);
      if (!lost.ok()) {
        return StoreGoneResult(group, &workers, lost.status());
      }
      if (lost->has_value() && watch_ != nullptr && (**lost).agent_id != group.nodes.front().agent_id) {
        // Its workers died with it (parent-death signal); the survivors
        // re-form without them. Node 0 holds the workers' store: not here.
        const NodeInfo& node = **lost;
        if (lost_nodes_.insert(node.agent_id).second) {
          Say(absl::StrCat("node ", node.hostname, " (", node.host, ") sent no heartbeat for ",
                           o_.rendezvous.heartbeat_timeout.count() / 1000.0,
                           " s: its workers leave the group, which goes on without them (--fault_tolerant)"));
          absl::Status counted = state.CountLostAsDone(node);
          if (!counted.ok()) return StoreGoneResult(group, &workers, counted);
        }
      } else if (lost->has_value()) {
        const NodeInfo& node = **lost;
        int rank = 0;
        for (const NodeInfo& n : group.nodes) {
          if (n.agent_id == node.agent_id) break;
          ++rank;
        }
        FailureRecord r;
        r.group_rank = rank;
        r.hostname = node.hostname;
        r.host = node.host;
        r.what = absl::StrCat("its agent sent no heartbeat for ", o_.rendezvous.heartbeat_timeout.count() / 1000.0,
                              " s (rdzv_conf heartbeat_timeout); it died or its host is unreachable");
        r.agent_lost = true;
        (void)state.PublishFailure(r);
        absl::StatusOr<std::optional<FailureRecord>> first = state.Failure();
        result.failure = first.ok() && first->has_value() ? **first : r;
        // A worker's failure first, while this agent was already silent:
        // the lost agent is the likely cause.
        if (!result.failure.agent_lost) result.cause = r;
        return result;
      }
    }
    if (!workers.AllEnded()) {
      absl::StatusOr<std::optional<WorkerExit>> ended = workers.WaitNext(next_check);
      if (!ended.ok()) {
        result.failure = AgentFailure(group, std::string(ended.status().message()), true);
        (void)state.PublishFailure(result.failure);
        return result;
      }
      if (ended->has_value() && !(*ended)->status.success()) {
        const WorkerExit& e = **ended;
        // A worker stopped by the signal we forwarded: report the signal.
        if (forwarder_->received() != 0) continue;
        if (watch_ != nullptr) {
          absl::StatusOr<bool> alone = RestartAlone(group, workers, e);
          if (!alone.ok()) return StoreGoneResult(group, &workers, alone.status());
          if (*alone) {
            next_check = SteadyClock::now();  // Follow the re-formation closely from now on.
            continue;
          }
        }
        FailureRecord r = WorkerFailure(group, workers, e);
        absl::Status published = state.PublishFailure(r);
        if (!published.ok()) {
          result.store_gone = true;
          result.cause = StoreGone(published);
          result.failure = r;
          result.failure.restartable = false;
          return result;
        }
        absl::StatusOr<std::optional<FailureRecord>> first = state.Failure();
        result.failure = first.ok() && first->has_value() ? **first : r;
        return result;
      }
      continue;
    }
    if (!done_marked) {
      absl::Status s = state.MarkDone();
      if (!s.ok()) return StoreGoneResult(group, &workers, s);
      done_marked = true;
    }
    const auto wait = std::chrono::ceil<milliseconds>(next_check - SteadyClock::now());
    absl::StatusOr<bool> all_done = state.WaitAllDone(std::max(wait, milliseconds(1)));
    if (!all_done.ok()) return StoreGoneResult(group, &workers, all_done.status());
    if (*all_done) {
      result.outcome = Outcome::kSucceeded;
      return result;
    }
  }
}

absl::Status Agent::OpenWorkerStore(const GroupAssignment& group, int restarts) {
  watch_.reset();
  worker_store_.reset();
  TcpStoreOptions options;
  options.host = group.master_addr;
  options.port = group.master_port;
  options.is_server = group.group_rank == 0;
  options.wait_for_workers = false;
  options.token = group.worker_token;
  options.timeout = o_.rendezvous.join_timeout;
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Create(options);
  if (!store.ok()) {
    return absl::Status(
        store.status().code(),
        absl::StrCat("--fault_tolerant: ", options.is_server ? "serving" : "reaching", " the workers' store at ",
                     group.master_addr, ":", group.master_port, ": ", store.status().message()));
  }
  // The workers' keys, as InitFromEnv prefixes them under an agent's store.
  worker_store_ = std::make_shared<PrefixStore>(absl::StrCat("/worker/attempt_", restarts),
                                                std::shared_ptr<Store>(*std::move(store)));
  watch_ = std::make_unique<ElasticWatch>(worker_store_, group.world_size);
  members_.clear();
  restarts_left_.assign(static_cast<size_t>(o_.nproc), o_.flags.max_restarts);
  for (int i = 0; i < o_.nproc; ++i) members_.push_back(group.rank_offset + i);
  lost_nodes_.clear();
  return absl::OkStatus();
}

absl::StatusOr<bool> Agent::RestartAlone(const GroupAssignment& group, WorkerGroup& workers, const WorkerExit& e) {
  const int rank = group.rank_offset + e.local_rank;
  const size_t i = static_cast<size_t>(e.local_rank);
  LOCKSTEP_RETURN_IF_ERROR(watch_->Lost(rank, members_[i], e.status.ToString()));
  if (restarts_left_[i] <= 0) {
    Say(absl::StrCat("worker ", rank, " lost (", e.status.ToString(), "); no restarts left for it (--max_restarts ",
                     o_.flags.max_restarts, ")"));
    return false;
  }
  LOCKSTEP_ASSIGN_OR_RETURN(const int member, watch_->NewMember());
  absl::Status restarted = workers.Restart(
      e.local_rank, {{"LOCKSTEP_ELASTIC_JOIN", "1"}, {"LOCKSTEP_ELASTIC_MEMBER", absl::StrCat(member)}});
  if (!restarted.ok()) {
    Say(absl::StrCat("worker ", rank, " lost (", e.status.ToString(),
                     "); restarting it failed: ", restarted.message()));
    return false;
  }
  --restarts_left_[i];
  members_[i] = member;
  watch_->Restarted(rank, member);
  return true;
}

void Agent::SayElasticLines() {
  absl::StatusOr<std::vector<std::string>> lines = watch_->Poll();
  if (!lines.ok()) return;  // The store's trouble shows in the next tick's heartbeat.
  for (const std::string& line : *lines) Say(line);
}

void Agent::MarkRunEnded(Store* run_store, const std::string& why) {
  if (store_.etcd == nullptr) return;  // Our own store ends with the job.
  (void)run_store->CompareSet("ended", "", why);
}

int Agent::Run() {
  const LaunchFlags& f = o_.flags;
  absl::StatusOr<std::string> address = ChooseNodeAddress(o_);
  if (!address.ok()) {
    Say(absl::StrCat("choosing this node's address: ", address.status().message()));
    return 1;
  }
  address_ = *address;
  absl::StatusOr<RendezvousStore> store = OpenRendezvousStore(o_);
  if (!store.ok()) {
    std::cerr << store.status().message() << std::endl;
    return 1;
  }
  store_ = *std::move(store);
  if (store_.token.empty()) Say(OpenJobWarning(store_.where));
  std::unique_ptr<PrefixStore> run_prefix;
  Store* run_store_ptr = store_.etcd.get();
  if (run_store_ptr == nullptr) {
    run_prefix = std::make_unique<PrefixStore>(absl::StrCat("lockstep-run/", f.rdzv_id, "/"), store_.tcp);
    run_store_ptr = run_prefix.get();
  }
  Store& run_store = *run_store_ptr;
  if (store_.etcd != nullptr) {
    // etcd outlives jobs: a run id that already ran to its end is not
    // joined again (torchrun's RendezvousClosedError).
    absl::StatusOr<bool> ended = run_store.Check({"ended"});
    if (!ended.ok() || *ended) {
      absl::StatusOr<std::string> why = ended.ok() ? run_store.Get("ended") : ended.status();
      std::cerr << "lockstep-run: the run --rdzv_id " << f.rdzv_id << " on etcd at " << store_.where
                << (ended.ok() ? " already ended (" : " cannot be read (")
                << (why.ok() ? *why : std::string(why.status().message()))
                << "); give every job its own --rdzv_id (e.g. $SLURM_JOB_ID), or remove the old run's keys: "
                << "etcdctl del --prefix " << store_.etcd->prefix() << std::endl;
      return 1;
    }
  }
  absl::StatusOr<std::string> log_dir = MakeRunLogDir(f);
  if (!log_dir.ok()) {
    std::cerr << log_dir.status().message() << std::endl;
    return 1;
  }
  if (!log_dir->empty()) Say(absl::StrCat("log directory: ", *log_dir));

  RendezvousOptions ro;
  // etcd runs the c10d rendezvous (same keys, same elastic rules) on etcd.
  ro.backend = o_.rendezvous.backend == "static" ? "static" : "c10d";
  ro.min_nodes = f.min_nodes;
  ro.max_nodes = f.max_nodes;
  ro.node_rank = f.node_rank;
  ro.local_world_size = o_.nproc;
  ro.host = address_;
  ro.hostname = hostname_;
  ro.join_timeout = o_.rendezvous.join_timeout;
  ro.last_call_timeout = o_.rendezvous.last_call_timeout;
  ro.join_token = store_.token;
  Rendezvous rendezvous(&run_store, ro);

  WorkerSpec spec;
  spec.argv = o_.worker_argv;
  spec.nproc = o_.nproc;
  spec.env.role = f.role;
  spec.env.run_id = f.rdzv_id;
  spec.env.max_restarts = f.max_restarts;
  spec.env.set_omp_num_threads = o_.set_omp_num_threads;
  spec.redirects = f.redirects;
  spec.tee = f.tee;

  int restarts = 0;  // After failures; TORCHELASTIC_RESTART_COUNT.
  // The latest attempt's failure and its likely cause, for the summary when
  // the group then cannot re-form.
  JobFailure last;
  int last_failed = -1;  // Its attempt.
  for (int round = 0;; ++round) {
    absl::StatusOr<GroupAssignment> group = rendezvous.Join(round, PickFreePort);
    if (!group.ok()) {
      last.ended = std::string(group.status().message());
      if (last.first.has_value()) {
        absl::StrAppend(&last.ended, " (after attempt ", last_failed, " failed; restart ", restarts, ")");
      }
      std::cerr << "[lockstep-run] " << group.status().message() << std::endl;
      std::cerr << FailureSummary(last, restarts, f.max_restarts) << std::flush;
      if (store_.token.empty()) Say(OpenJobWarning(store_.where));
      return 1;
    }
    round = group->attempt;  // c10d may have moved on to a later round.
    if (store_.etcd != nullptr && liveness_ == nullptr) {
      absl::StatusOr<std::unique_ptr<EtcdLiveness>> live =
          EtcdLiveness::Start(store_.etcd.get(), rendezvous.agent_id(), absl::StrCat(hostname_, " ", address_),
                              o_.rendezvous.heartbeat_timeout);
      if (!live.ok()) {
        Say(absl::StrCat("cannot take a lease at etcd ", store_.where, ": ", live.status().message()));
        return 1;
      }
      liveness_ = *std::move(live);
    }
    Say(absl::StrCat("attempt ", round, " (restart ", restarts, "): node rank ", group->group_rank, " of ",
                     group->group_world_size, " on ", hostname_, " (", address_, "), ranks ", group->rank_offset, "..",
                     group->rank_offset + o_.nproc - 1, " of ", group->world_size, ", MASTER_ADDR=", group->master_addr,
                     " MASTER_PORT=", group->master_port));
    GroupState state(&run_store, *group, rendezvous.agent_id(), liveness_.get());
    if (!log_dir->empty()) spec.attempt_log_dir = absl::StrCat(*log_dir, "/attempt_", round);
    spec.env.restart_count = restarts;
    AttemptResult result;
    absl::StatusOr<std::unique_ptr<WorkerGroup>> workers = absl::FailedPreconditionError("not started");
    if (f.fault_tolerant) {
      spec.restartable = true;
      spec.extra_env = {{"TORCHELASTIC_USE_AGENT_STORE", "True"}};
      absl::Status opened = OpenWorkerStore(*group, restarts);
      if (!opened.ok()) workers = opened;
    }
    if (!f.fault_tolerant || worker_store_ != nullptr) workers = WorkerGroup::Start(spec, *group);
    if (!workers.ok()) {
      result.failure = AgentFailure(*group, std::string(workers.status().message()), true);
      (void)state.PublishFailure(result.failure);
    } else {
      result = Monitor(*group, state, **workers);
    }
    const auto ended_at = SteadyClock::now();
    // Alive and done with this attempt: said before stopping the workers
    // (which may take the grace period), so that no other agent takes this
    // one for lost.
    if (result.outcome != Outcome::kSucceeded && !result.store_gone) (void)state.MarkLeft();
    if (workers.ok()) {
      (*workers)->Stop(o_.stop_grace);
      forwarder_->SetTargets({});
    }
    if (result.outcome == Outcome::kSucceeded) {
      Say(absl::StrCat("every worker on every node succeeded (attempt ", round, ")"));
      MarkRunEnded(&run_store, absl::StrCat("succeeded at attempt ", round));
      if (store_.token.empty()) Say(OpenJobWarning(store_.where));
      Leave(state, nullptr);
      return 0;
    }
    if (result.outcome == Outcome::kInterrupted) {
      Say(absl::StrCat("stopped the workers after signal ", result.signal, " (", strsignal(result.signal), ")"));
      MarkRunEnded(&run_store, absl::StrCat("interrupted by signal ", result.signal, " at attempt ", round));
      Leave(state, &result.failure);
      return 128 + result.signal;
    }
    if (result.outcome == Outcome::kNodesWaiting) {
      Say(absl::StrCat(result.nodes_waiting,
                       " node(s) waiting to join; re-forming the group (not counted as a restart)"));
      continue;
    }
    if (!result.store_gone) FindLostAgents(*group, state, ended_at, &result);
    const FailureRecord& r = result.failure;
    last.first = r;
    last_failed = round;
    last.likely_cause = result.cause;
    std::string who = DescribeFailure(r);
    if (result.cause.has_value()) absl::StrAppend(&who, "; likely cause: ", DescribeFailure(*result.cause));
    if (r.restartable && !result.store_gone && restarts < f.max_restarts) {
      ++restarts;
      Say(absl::StrCat("attempt ", round, " failed (", who, "); restarting the group (restart ", restarts, " of ",
                       f.max_restarts, ")"));
      continue;
    }
    if (result.store_gone) {
      last.ended = absl::StrCat("the rendezvous store at ", store_.where,
                                " is gone, so the group cannot re-form (attempt ", round, ")");
    } else if (!r.restartable) {
      last.ended = absl::StrCat("attempt ", round, " failed in a way a restart cannot mend");
    } else {
      last.ended =
          absl::StrCat("attempt ", round, " failed and no restarts are left (--max_restarts ", f.max_restarts, ")");
    }
    std::cerr << FailureSummary(last, restarts, f.max_restarts) << std::flush;
    if (store_.token.empty()) Say(OpenJobWarning(store_.where));
    if (!result.store_gone) MarkRunEnded(&run_store, absl::StrCat("failed: ", last.ended));
    if (!result.store_gone) Leave(state, &r);
    return 1;
  }
}

}  // namespace

int RunAgent(const AgentOptions& options, SignalForwarder* forwarder) {
  Agent agent(options, forwarder);
  return agent.Run();
}

}  // namespace launch
}  // namespace lockstep
