#include "dp/replicate.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace lockstep {

absl::StatusOr<std::vector<std::unique_ptr<Module>>> Replicate(const Module& module, absl::Span<const Device> devices) {
  std::vector<std::unique_ptr<Module>> replicas;
  replicas.reserve(devices.size());
  for (size_t i = 0; i < devices.size(); ++i) {
    absl::StatusOr<std::unique_ptr<Module>> copy = module.CloneTo(devices[i]);
    if (!copy.ok()) {
      return absl::Status(copy.status().code(), absl::StrCat("Replicate: replica ", i, " on device ",
                                                             devices[i].ToString(), ": ", copy.status().message()));
    }
    replicas.push_back(std::move(*copy));
  }
  return replicas;
}

absl::Status CopyStateTo(Module& source, Module& replica) {
  const std::vector<NamedTensor> from = source.StateDict();
  const std::vector<NamedTensor> to = replica.StateDict();
  // Check everything first so that a mismatch writes nothing.
  if (from.size() != to.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CopyStateTo: the replica has ", to.size(), " state entries but the source has ", from.size()));
  }
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i].first != to[i].first || from[i].second.shape() != to[i].second.shape() ||
        from[i].second.dtype() != to[i].second.dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CopyStateTo: the replica is not a copy of the source: entry ", i, " is ", to[i].first, " ",
          to[i].second.DebugString(), " but the source has ", from[i].first, " ", from[i].second.DebugString()));
    }
  }
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i].second.SharesStorageWith(to[i].second) &&
        from[i].second.storage_offset() == to[i].second.storage_offset()) {
      continue;  // the same tensor
    }
    LOCKSTEP_RETURN_IF_ERROR(to[i].second.CopyFrom(from[i].second));
  }
  replica.Train(source.is_training());
  return absl::OkStatus();
}

}  // namespace lockstep
