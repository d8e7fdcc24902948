#include "data/dataset.h"

#include "absl/strings/str_cat.h"

namespace lockstep {

absl::Status CheckGetArgs(const Dataset& dataset, const char* name, int64_t index, absl::Span<float> features,
                          const int64_t* label) {
  if (index < 0 || index >= dataset.size()) {
    return absl::OutOfRangeError(absl::StrCat(name, "::Get: index ", index, " is outside [0, ", dataset.size(), ")"));
  }
  if (static_cast<int64_t>(features.size()) != dataset.example_numel()) {
    return absl::InvalidArgumentError(absl::StrCat(name, "::Get: the features buffer holds ", features.size(),
                                                   " floats, an example has ", dataset.example_numel()));
  }
  if (label == nullptr) return absl::InvalidArgumentError(absl::StrCat(name, "::Get: label is null"));
  return absl::OkStatus();
}

}  // namespace lockstep
