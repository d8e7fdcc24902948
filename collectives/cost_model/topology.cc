#include "collectives/cost_model/topology.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace cost_model {

std::string Topology::Describe() const {
  return absl::StrCat("p=", p, " (", hosts, hosts == 1 ? " host" : " hosts", " x ", ranks_per_host,
                      ranks_per_host == 1 ? " rank" : " ranks", ", ", cores_per_host,
                      cores_per_host == 1 ? " core" : " cores", " each)");
}

absl::Status ValidateTopology(const Topology& t) {
  if (t.p < 1) return absl::InvalidArgumentError(absl::StrCat("Topology.p is ", t.p, "; it must be >= 1"));
  if (t.hosts < 1) {
    return absl::InvalidArgumentError(absl::StrCat("Topology.hosts is ", t.hosts, "; it must be >= 1"));
  }
  if (t.ranks_per_host < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Topology.ranks_per_host is ", t.ranks_per_host, "; it must be >= 1"));
  }
  if (t.cores_per_host < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Topology.cores_per_host is ", t.cores_per_host, "; it must be >= 1"));
  }
  if (t.hosts > std::numeric_limits<int64_t>::max() / t.ranks_per_host || t.hosts * t.ranks_per_host != t.p) {
    return absl::InvalidArgumentError(absl::StrCat("Topology.p is ", t.p, " but hosts x ranks_per_host is ", t.hosts,
                                                   " x ", t.ranks_per_host, "; they must be equal"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Topology> MakeTopology(int64_t p, int64_t ranks_per_host, int cores_per_host) {
  if (p < 1) return absl::InvalidArgumentError(absl::StrCat("Topology.p is ", p, "; it must be >= 1"));
  if (ranks_per_host < 1 || ranks_per_host > p || p % ranks_per_host != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Topology.ranks_per_host is ", ranks_per_host, "; it must be >= 1 and divide p = ", p));
  }
  Topology t;
  t.p = p;
  t.ranks_per_host = ranks_per_host;
  t.hosts = p / ranks_per_host;
  if (cores_per_host <= 0) {
    t.cores_per_host = ranks_per_host > std::numeric_limits<int>::max() ? std::numeric_limits<int>::max()
                                                                        : static_cast<int>(ranks_per_host);
  } else {
    t.cores_per_host = cores_per_host;
  }
  return t;
}

}  // namespace cost_model
}  // namespace lockstep
