// The benchmark's collectives, one descriptor each (one per file in this
// folder; tools/bench/collective_descriptor.h says what a descriptor holds).
//
//   LOCKSTEP_ASSIGN_OR_RETURN(const CollectiveDescriptor* op, FindCollective("reduce_scatter"));
#ifndef LOCKSTEP_TOOLS_BENCH_OPS_REGISTRY_H_
#define LOCKSTEP_TOOLS_BENCH_OPS_REGISTRY_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/bench/collective_descriptor.h"

namespace lockstep {
namespace bench {

CollectiveDescriptor AllReduceCollective();
CollectiveDescriptor AllGatherCollective();
CollectiveDescriptor AllGatherVCollective();
CollectiveDescriptor ReduceScatterCollective();
CollectiveDescriptor BroadcastCollective();
CollectiveDescriptor ReduceCollective();
CollectiveDescriptor GatherCollective();
CollectiveDescriptor ScatterCollective();
CollectiveDescriptor AllToAllCollective();
CollectiveDescriptor SendRecvCollective();

// Every descriptor above, in that order (the order --op's error lists them).
const std::vector<CollectiveDescriptor>& AllCollectives();

// The descriptor whose name is `name`, or an error that lists the names.
absl::StatusOr<const CollectiveDescriptor*> FindCollective(absl::string_view name);

}  // namespace bench
}  // namespace lockstep

#endif  // LOCKSTEP_TOOLS_BENCH_OPS_REGISTRY_H_
