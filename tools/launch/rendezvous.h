// Rendezvous: how the agents of a job agree, through a shared Store, on who
// is in the worker group of each attempt, which node rank each has, and
// where the workers' own store goes (MASTER_ADDR, MASTER_PORT, token).
//
//   Rendezvous rdzv(store, options);  // store: the rendezvous store, run-scoped
//   LOCKSTEP_ASSIGN_OR_RETURN(GroupAssignment group, rdzv.Join(attempt, PickFreePort));
//   // group.group_rank, group.rank_offset, group.world_size, group.master_port, ...
//
// Backends (torchrun's names):
// - static: every agent brings its --node_rank; the group is the `max_nodes`
//   ranks. A node rank claimed twice fails both with the hosts named.
// - c10d: agents take an arrival number once (`agent_id`) and keep it, so a
//   node keeps its node rank across restarts; node ranks are the members'
//   order by arrival number. The group closes once `max_nodes` joined, or
//   once `min_nodes` joined and `last_call_timeout` passed (the first agent
//   to see that writes the size: everyone agrees). An agent that comes after
//   the group closed counts itself as waiting (a<k>/waiting) and joins round
//   k + 1; the members see it (GroupState::NodesWaiting) and re-form the
//   group to take it in, as torchrun scales up. A new agent starts at the
//   latest round (key `latest`).
// Either way, waiting for the others is bounded by `join_timeout`, and the
// error names how many came out of how many.
//
// Keys (attempt k): a<k>/node/<r> (static), a<k>/joined, a<k>/member/<i>,
// a<k>/closed (c10d), a<k>/master (node rank 0's host and port for the
// workers, and a fresh nonce: the workers' token is HMAC-SHA256(join token,
// attempt, nonce), or the nonce itself when there is no join token,
// the store then being open to anyone anyway). The shared state while the
// group runs is in group_state.h.
#ifndef LOCKSTEP_TOOLS_LAUNCH_RENDEZVOUS_H_
#define LOCKSTEP_TOOLS_LAUNCH_RENDEZVOUS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/store/store.h"
#include "core/deadline.h"

namespace lockstep {
namespace launch {

struct RendezvousOptions {
  std::string backend = "static";  // "static" or "c10d".
  int min_nodes = 1;
  int max_nodes = 1;
  int node_rank = 0;  // static only.
  int local_world_size = 1;
  std::string host;      // This node's address as the other nodes reach it.
  std::string hostname;  // For messages.
  std::chrono::milliseconds join_timeout{900000};
  std::chrono::milliseconds last_call_timeout{30000};
  // How often a c10d agent looks at the member count while the join window
  // is open (the store call itself blocks up to this long).
  std::chrono::milliseconds poll_interval{100};
  // c10d: a node that comes late waits for the next round (else: refused).
  bool admit_late_nodes = true;
  // The rendezvous store's join token ("" = none). With one, the workers'
  // token is derived from it and never stored: only an agent (a holder of
  // the join token) can compute it, so whoever can read the store's keys
  // without being an agent learns nothing that opens the workers' store or
  // their rank handshake.
  std::string join_token;
};

struct NodeInfo {
  int64_t agent_id = 0;  // static: the node rank; c10d: the arrival number.
  std::string host;
  std::string hostname;
  int local_world_size = 0;
};

// One attempt's worker group, the same on every agent.
struct GroupAssignment {
  int attempt = 0;
  int group_rank = 0;           // This node's rank (GROUP_RANK).
  int group_world_size = 0;     // Nodes (GROUP_WORLD_SIZE).
  int rank_offset = 0;          // Global rank of this node's local rank 0.
  int world_size = 0;           // Workers on all nodes.
  std::vector<NodeInfo> nodes;  // By group rank.
  std::string master_addr;      // Node rank 0's host.
  int master_port = 0;          // Chosen by node rank 0 for this attempt.
  std::string worker_token;     // LOCKSTEP_STORE_TOKEN for this attempt.
};

// Picks a port on `host` for the workers' store (node rank 0 only).
using PortChooser = std::function<absl::StatusOr<int>(const std::string& host)>;

// A free TCP port on `host`: bind port 0, read it, close. Another process
// may take it before rank 0 binds it; then that attempt fails and a restart
// picks another.
absl::StatusOr<int> PickFreePort(const std::string& host);

class Rendezvous {
 public:
  // `store` outlives this object and is scoped to the run (a PrefixStore).
  Rendezvous(Store* store, RendezvousOptions options);

  // Joins round `attempt` (0, 1, ...) and returns its group once formed.
  // c10d may join a later round (a new node joins the latest; a late one the
  // next): GroupAssignment::attempt says which.
  absl::StatusOr<GroupAssignment> Join(int attempt, const PortChooser& choose_port);

  // This agent's stable id (valid after the first Join).
  int64_t agent_id() const { return agent_id_; }

 private:
  // The workers' token of `attempt` from the master record's nonce.
  std::string WorkerToken(const std::string& join_token, int attempt, const std::string& nonce) const;
  absl::StatusOr<std::vector<NodeInfo>> JoinStatic(int attempt);
  absl::StatusOr<std::vector<NodeInfo>> JoinElastic(int* attempt);
  // One round; *late when its group closed without this node.
  absl::StatusOr<std::vector<NodeInfo>> JoinElasticRound(int attempt, SteadyClock::time_point deadline, bool* late);
  NodeInfo Self() const;

  Store* store_;
  RendezvousOptions options_;
  int64_t agent_id_ = -1;
  std::string nonce_;  // Tells this agent's claims from another's.
};

// NodeInfo as a store value ("id\thost\thostname\tlocal_world_size\tnonce").
std::string EncodeNodeInfo(const NodeInfo& node, const std::string& nonce);
absl::StatusOr<NodeInfo> DecodeNodeInfo(const std::string& text, std::string* nonce);

}  // namespace launch
}  // namespace lockstep

#endif  // LOCKSTEP_TOOLS_LAUNCH_RENDEZVOUS_H_
