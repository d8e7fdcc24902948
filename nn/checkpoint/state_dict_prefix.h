// One rule for the state dicts of wrapped models (DistributedDataParallel,
// DataParallel): they are saved under the plain module's names, which
// PyTorch loads into the un-wrapped model, and loading accepts both those
// and PyTorch's "module."-prefixed names (what `torch.save(ddp.state_dict())`
// writes for a DDP or DP model).
//
//   std::vector<NamedTensor> state = ...;           // from a file
//   LOCKSTEP_RETURN_IF_ERROR(LoadStateDictAcceptingWrapperPrefix(model, state));
#ifndef LOCKSTEP_NN_CHECKPOINT_STATE_DICT_PREFIX_H_
#define LOCKSTEP_NN_CHECKPOINT_STATE_DICT_PREFIX_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "nn/module.h"

namespace lockstep {

// The prefix PyTorch's wrappers put before every name.
inline constexpr absl::string_view kWrapperPrefix = "module.";

// torch.nn.modules.utils.consume_prefix_in_state_dict_if_present: names
// that start with `prefix` lose it; others are kept as they are.
std::vector<NamedTensor> StripPrefixIfPresent(std::vector<NamedTensor> state,
                                              absl::string_view prefix = kWrapperPrefix);

// Module::LoadStateDict after StripPrefixIfPresent("module.").
absl::Status LoadStateDictAcceptingWrapperPrefix(Module& module, const std::vector<NamedTensor>& state,
                                                 bool strict = true);

}  // namespace lockstep

#endif  // LOCKSTEP_NN_CHECKPOINT_STATE_DICT_PREFIX_H_
