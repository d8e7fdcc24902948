#include "tools/bench/ops/registry.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace bench {

const std::vector<CollectiveDescriptor>& AllCollectives() {
  static const auto* const all = new std::vector<CollectiveDescriptor>{
      AllReduceCollective(), AllGatherCollective(), AllGatherVCollective(), ReduceScatterCollective(),
      BroadcastCollective(), ReduceCollective(),    GatherCollective(),     ScatterCollective(),
      AllToAllCollective(),  SendRecvCollective(),
  };
  return *all;
}

absl::StatusOr<const CollectiveDescriptor*> FindCollective(absl::string_view name) {
  const std::vector<CollectiveDescriptor>& all = AllCollectives();
  for (const CollectiveDescriptor& op : all) {
    if (op.name == name) return &op;
  }
  std::string names;  // "a, b, ... y or z"
  for (size_t i = 0; i < all.size(); ++i) {
    absl::StrAppend(&names, i == 0 ? "" : i + 1 == all.size() ? " or " : ", ", all[i].name);
  }
  return absl::InvalidArgumentError(absl::StrCat("--op=", name, " is not a collective; use ", names));
}

}  // namespace bench
}  // namespace lockstep
