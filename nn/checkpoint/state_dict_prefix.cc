#include "nn/checkpoint/state_dict_prefix.h"

#include <utility>

#include "absl/strings/match.h"

namespace lockstep {

std::vector<NamedTensor> StripPrefixIfPresent(std::vector<NamedTensor> state, absl::string_view prefix) {
  for (NamedTensor& entry : state) {
    if (absl::StartsWith(entry.first, prefix)) entry.first.erase(0, prefix.size());
  }
  return state;
}

absl::Status LoadStateDictAcceptingWrapperPrefix(Module& module, const std::vector<NamedTensor>& state, bool strict) {
  return module.LoadStateDict(StripPrefixIfPresent(state), strict);
}

}  // namespace lockstep
