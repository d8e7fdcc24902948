// EtcdLiveness: an agent's liveness on etcd (AgentLiveness, group_state.h).
// The agent holds a lease whose TTL is the heartbeat timeout and keeps it
// alive (every TTL/3); its key alive/<agent id> is on that lease, so etcd
// deletes it when the agent stops renewing (died, or cut off). Every agent
// watches alive/: a delete reaches the others at once, with no store
// traffic per tick and none that grows with the number of agents.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<EtcdLiveness> live,
//                             EtcdLiveness::Start(etcd_store, agent_id, hostname, heartbeat_timeout));
//   GroupState state(etcd_store, group, agent_id, live.get());
//
// Leaving does not revoke the lease: the key lapses one TTL later, so that
// an agent still finishing its own attempt never takes a successful peer's
// exit for a loss (as a stopped heartbeat counter takes that long too).
#ifndef LOCKSTEP_TOOLS_LAUNCH_ETCD_LIVENESS_H_
#define LOCKSTEP_TOOLS_LAUNCH_ETCD_LIVENESS_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/store/etcd/etcd_store.h"
#include "core/deadline.h"
#include "tools/launch/group_state.h"

namespace lockstep {
namespace launch {

class EtcdLiveness : public AgentLiveness {
 public:
  // Grants the lease, puts alive/<agent_id> (value `about`, for people
  // reading etcd) and starts renewing and watching. `store` outlives this.
  static absl::StatusOr<std::unique_ptr<EtcdLiveness>> Start(EtcdStore* store, int64_t agent_id, std::string about,
                                                             std::chrono::milliseconds ttl);
  ~EtcdLiveness() override;

  // An error once the lease could not be renewed for a whole TTL (etcd
  // unreachable): the others have then counted this agent lost.
  absl::Status Beat() override;
  // An agent whose key etcd deleted, or that never put one within `timeout`
  // of being first asked about.
  absl::StatusOr<std::optional<int64_t>> Lost(const std::vector<int64_t>& agent_ids,
                                              std::chrono::milliseconds timeout) override;

 private:
  EtcdLiveness(EtcdStore* store, int64_t agent_id, std::string about, std::chrono::milliseconds ttl);
  absl::Status Register();  // Grants a lease and puts the key on it.
  void KeepAliveLoop();
  void WatchLoop();
  void Apply(const std::string& key, bool deleted);

  EtcdStore* store_;
  const int64_t agent_id_;
  const std::string about_;
  const std::chrono::milliseconds ttl_;
  std::atomic<bool> cancel_{false};

  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  int64_t lease_ = 0;
  SteadyClock::time_point renewed_;  // Last renewal that etcd confirmed.
  absl::Status renew_error_;
  std::set<int64_t> alive_;
  std::set<int64_t> gone_;
  std::map<int64_t, SteadyClock::time_point> first_asked_;

  std::thread keepalive_;
  std::thread watch_;
};

}  // namespace launch
}  // namespace lockstep

#endif  // LOCKSTEP_TOOLS_LAUNCH_ETCD_LIVENESS_H_
