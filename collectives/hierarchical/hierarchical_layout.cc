#include "collectives/hierarchical/hierarchical_layout.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lockstep {

absl::StatusOr<HostLayout> HostLayout::FromIdentities(const std::vector<std::string>& identities) {
  if (identities.empty()) return absl::InvalidArgumentError("HostLayout: no ranks");
  HostLayout layout;
  std::map<std::string, int> host_by_id;
  for (int rank = 0; rank < static_cast<int>(identities.size()); ++rank) {
    const std::string& id = identities[rank];
    if (id.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("HostLayout: rank ", rank, " has an empty host identity"));
    }
    auto [it, added] = host_by_id.emplace(id, layout.num_hosts());
    if (added) layout.hosts.emplace_back();
    layout.host_of.push_back(it->second);
    layout.local_index.push_back(static_cast<int>(layout.hosts[it->second].size()));
    layout.hosts[it->second].push_back(rank);  // Ranks come in order: lists stay sorted.
  }
  return layout;
}

std::string HostLayout::Describe() const {
  std::vector<std::string> parts;
  for (const std::vector<int>& ranks : hosts) parts.push_back(absl::StrCat("{", absl::StrJoin(ranks, ","), "}"));
  return absl::StrJoin(parts, " ");
}

}  // namespace lockstep
