// Where the ranks of a group run: `hosts` hosts of `ranks_per_host` ranks
// each, placed host by host (ranks 0..L-1 on host 0, L..2L-1 on host 1, as
// launchers number them), on hosts of `cores_per_host` cores.
//
//   using namespace lockstep::cost_model;
//   absl::StatusOr<Topology> t = MakeTopology(/*p=*/1024, /*ranks_per_host=*/8, /*cores_per_host=*/8);
//   // t->hosts == 128
//
// The model assumes every host has the same number of ranks (a group with
// uneven hosts is modeled by its fullest host) and that a host's ranks are
// consecutive. Which kind of link a pair of ranks uses follows from this:
// the same host or not.
#ifndef LOCKSTEP_COLLECTIVES_COST_MODEL_TOPOLOGY_H_
#define LOCKSTEP_COLLECTIVES_COST_MODEL_TOPOLOGY_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lockstep {
namespace cost_model {

struct Topology {
  int64_t p = 1;               // ranks in the group
  int64_t hosts = 1;           // H
  int64_t ranks_per_host = 1;  // L
  int cores_per_host = 1;      // C

  bool single_host() const { return hosts == 1; }
  bool one_rank_per_host() const { return ranks_per_host == 1; }
  // Several hosts with several ranks each: where today's lockstep goes hierarchical.
  bool mixed() const { return hosts > 1 && ranks_per_host > 1; }
  // "p=1024 (128 hosts x 8 ranks, 8 cores each)", for messages and tables.
  std::string Describe() const;
};

// InvalidArgument naming the field: every count >= 1 and p == hosts * ranks_per_host.
absl::Status ValidateTopology(const Topology& topology);

// The topology of p ranks, ranks_per_host on each host (it must divide p);
// cores_per_host <= 0 means as many cores as ranks (no oversubscription).
absl::StatusOr<Topology> MakeTopology(int64_t p, int64_t ranks_per_host, int cores_per_host = 0);

}  // namespace cost_model
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_COST_MODEL_TOPOLOGY_H_
