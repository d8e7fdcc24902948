// GroupState: what the agents of one attempt share in the rendezvous store
// while their workers run: the first failure, who has finished, and each
// agent's heartbeat.
//
//   GroupState state(store, group, rdzv.agent_id());
//   state.Heartbeat();                                   // every tick
//   if (worker failed) state.PublishFailure(record);     // the first one wins
//   LOCKSTEP_ASSIGN_OR_RETURN(std::optional<FailureRecord> f, state.Failure());
//   LOCKSTEP_ASSIGN_OR_RETURN(std::optional<NodeInfo> lost, state.StaleAgent(timeout));
//   state.MarkDone();  ... state.WaitAllDone(tick) ...
//
// Heartbeats are counters, not timestamps: an agent counts another as lost
// when that agent's counter has not moved for `timeout` on its own clock, so
// the hosts' clocks need not agree.
//
// Keys (attempt k): a<k>/failure, a<k>/done, a<k>/all_done, a<k>/exited/<agent id>,
// a<k>/left/<agent id>, a<k>/waiting (rendezvous.h);
// hb/<agent id> (across attempts).
#ifndef LOCKSTEP_TOOLS_LAUNCH_GROUP_STATE_H_
#define LOCKSTEP_TOOLS_LAUNCH_GROUP_STATE_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/store/store.h"
#include "core/deadline.h"
#include "tools/launch/rendezvous.h"

namespace lockstep {
namespace launch {

// Why an attempt failed: a worker (rank >= 0) or an agent (rank -1).
struct FailureRecord {
  int rank = -1;
  int local_rank = -1;
  int group_rank = -1;
  std::string hostname;
  std::string host;
  std::string what;    // "exited with code 3", "killed by signal 9 (Killed)", or the agent's reason.
  int exit_code = -1;  // -1 when signaled or not a worker.
  int signal = 0;
  std::string tail;  // The worker's last lines of output.
  // False when the group cannot form again (the rendezvous store is gone).
  bool restartable = true;
  // The agent of node `group_rank` stopped sending heartbeats.
  bool agent_lost = false;
};

std::string EncodeFailure(const FailureRecord& record);
absl::StatusOr<FailureRecord> DecodeFailure(const std::string& text);

// Why the job ended in failure: what the summary says.
struct JobFailure {
  // The first failure of the last attempt that ran (none: no worker ran).
  std::optional<FailureRecord> first;
  // An agent found lost about when `first` happened (its heartbeat stopped,
  // it did not answer the failure, or the rendezvous store it hosted went
  // away): `first` is then probably a consequence of it.
  std::optional<FailureRecord> likely_cause;
  // Why no restart follows: no restarts left, the store is gone, a
  // rendezvous that could not re-form, ...
  std::string ended;
};

// The summary every agent prints when it gives up, torchrun-like:
// the first failed rank, its host, how it ended and its last lines, the
// likely cause when an agent was lost, and why the job ended.
std::string FailureSummary(const JobFailure& job, int restarts, int max_restarts);
std::string FailureSummary(const FailureRecord& record, int restarts, int max_restarts);
// One line naming a failure: "rank 3 on node1 exited with code 7", or
// "the agent of node rank 1 on host node1 (10.0.0.2): <what>".
std::string DescribeFailure(const FailureRecord& record);

// How the agents tell a live one from a lost one. The default (no
// AgentLiveness) is counters in the store, above; with etcd, leases
// (etcd_liveness.h): etcd itself deletes a silent agent's key and a watch
// tells the others, nobody polls.
class AgentLiveness {
 public:
  virtual ~AgentLiveness() = default;
  // This agent is alive (called every tick; an error: it cannot say so).
  virtual absl::Status Beat() = 0;
  // The first of `agent_ids` found lost; `timeout` bounds how long one that
  // never showed up may take.
  virtual absl::StatusOr<std::optional<int64_t>> Lost(const std::vector<int64_t>& agent_ids,
                                                      std::chrono::milliseconds timeout) = 0;
};

class GroupState {
 public:
  // `liveness` (may be null: heartbeat counters in `store`) outlives this.
  GroupState(Store* store, const GroupAssignment& group, int64_t agent_id, AgentLiveness* liveness = nullptr);

  // Publishes `record` unless another failure came first.
  absl::Status PublishFailure(const FailureRecord& record);
  // The attempt's first failure, if any.
  absl::StatusOr<std::optional<FailureRecord>> Failure();

  absl::Status Heartbeat();
  // A member whose heartbeat has not moved for `timeout` (by this agent's
  // clock, since this GroupState was made), if any.
  absl::StatusOr<std::optional<NodeInfo>> StaleAgent(std::chrono::milliseconds timeout);

  // Nodes that came after this round's group closed and wait for the next
  // (c10d): the members re-form the group to take them in.
  absl::StatusOr<int64_t> NodesWaiting();

  // This node's workers all succeeded.
  absl::Status MarkDone();
  // lockstep-run --fault_tolerant: a node found lost (StaleAgent) will not
  // say MarkDone; one surviving agent counts it, unless it had.
  absl::Status CountLostAsDone(const NodeInfo& node);
  // True when every node's workers succeeded (waits up to `timeout`).
  absl::StatusOr<bool> WaitAllDone(std::chrono::milliseconds timeout);

  // This agent is done with this attempt after a failure (or leaves it for
  // another reason) and is alive: said right after it saw the failure, so
  // that the others can tell a lost agent from a live one.
  absl::Status MarkLeft();
  // Waits up to `timeout` for every other member (but those found lost) to
  // say MarkLeft; returns the ones that did not (and counts them as lost).
  absl::StatusOr<std::vector<NodeInfo>> WaitOthersLeft(std::chrono::milliseconds timeout);

  // This agent is leaving (after success or its final failure).
  absl::Status MarkExited();
  // The store's host waits for the others to leave before it closes the
  // store, so that none of them mistakes the store's end for a failure
  // (agents StaleAgent found lost are not waited for).
  absl::Status WaitAllExited(std::chrono::milliseconds timeout);
  // Another agent found the agent of node `group_rank` lost: not waited for.
  void MarkLost(int group_rank);

 private:
  std::string Key(const char* what) const;
  absl::Status CountDone();

  Store* store_;
  GroupAssignment group_;
  int64_t agent_id_;
  AgentLiveness* liveness_;
  struct Seen {
    int64_t value = -1;
    SteadyClock::time_point changed;
  };
  std::map<int64_t, Seen> heartbeats_;  // By agent id.
  std::set<int64_t> lost_;              // Found stale.
};

}  // namespace launch
}  // namespace lockstep

#endif  // LOCKSTEP_TOOLS_LAUNCH_GROUP_STATE_H_
