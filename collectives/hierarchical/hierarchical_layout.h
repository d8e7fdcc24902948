// Which ranks share a host: the shape a hierarchical group runs on, and the
// basis of the automatic transport choice (collectives/bootstrap/communicator_factory.h).
//
//   // Every rank's host identity (collectives/transport/host_identity.h), by rank:
//   LOCKSTEP_ASSIGN_OR_RETURN(HostLayout layout,
//                             HostLayout::FromIdentities({"a", "a", "b", "b"}));
//   layout.hosts        // {{0, 1}, {2, 3}}
//   layout.leader(1)    // 2: the lowest rank of host 1
//
// Hosts are numbered in the order of their lowest rank, and each host's
// ranks are listed in ascending order; a rank's local index is its position
// in that list, so the leader of every host is its local rank 0.
#ifndef LOCKSTEP_COLLECTIVES_HIERARCHICAL_HIERARCHICAL_LAYOUT_H_
#define LOCKSTEP_COLLECTIVES_HIERARCHICAL_HIERARCHICAL_LAYOUT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep {

struct HostLayout {
  std::vector<std::vector<int>> hosts;  // [host] -> its ranks, ascending.
  std::vector<int> host_of;             // [rank] -> host.
  std::vector<int> local_index;         // [rank] -> position in its host's list.

  // Fails on an empty list or an empty identity (naming the rank).
  static absl::StatusOr<HostLayout> FromIdentities(const std::vector<std::string>& identities);

  int world_size() const { return static_cast<int>(host_of.size()); }
  int num_hosts() const { return static_cast<int>(hosts.size()); }
  int leader(int host) const { return hosts[host][0]; }
  bool is_leader(int rank) const { return local_index[rank] == 0; }
  bool single_host() const { return hosts.size() == 1; }
  bool one_rank_per_host() const { return hosts.size() == host_of.size(); }
  // "{0,1} {2,3}", for messages.
  std::string Describe() const;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_HIERARCHICAL_HIERARCHICAL_LAYOUT_H_
