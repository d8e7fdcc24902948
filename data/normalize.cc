#include "data/normalize.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace lockstep {

absl::StatusOr<std::shared_ptr<Normalize>> Normalize::Create(std::shared_ptr<const Dataset> base,
                                                             std::vector<float> mean, std::vector<float> std) {
  if (base == nullptr) return absl::InvalidArgumentError("Normalize: no base dataset");
  const std::vector<int64_t> shape = base->example_shape();
  const int64_t channels = shape.empty() ? 1 : shape[0];
  if (mean.size() != std.size() || mean.empty() ||
      (mean.size() != 1 && static_cast<int64_t>(mean.size()) != channels)) {
    return absl::InvalidArgumentError(absl::StrCat("Normalize: got ", mean.size(), " means and ", std.size(),
                                                   " stds; give one of each, or one per channel (", channels, ")"));
  }
  for (size_t c = 0; c < std.size(); ++c) {
    if (!(std[c] > 0) || !std::isfinite(std[c]) || !std::isfinite(mean[c])) {
      return absl::InvalidArgumentError(absl::StrCat("Normalize: channel ", c, " has mean ", mean[c], " and std ",
                                                     std[c], "; std must be positive and both finite"));
    }
  }
  const float mean0 = mean[0], std0 = std[0];
  mean.resize(static_cast<size_t>(channels), mean0);
  std.resize(static_cast<size_t>(channels), std0);
  return std::shared_ptr<Normalize>(new Normalize(std::move(base), std::move(mean), std::move(std)));
}

absl::Status Normalize::Get(int64_t index, absl::Span<float> features, int64_t* label) const {
  absl::Status s = base_->Get(index, features, label);
  if (!s.ok()) return s;
  const int64_t channels = static_cast<int64_t>(mean_.size());
  const int64_t per_channel = static_cast<int64_t>(features.size()) / channels;
  for (int64_t c = 0; c < channels; ++c) {
    float* x = features.data() + c * per_channel;
    const float m = mean_[c], sd = std_[c];
    // (x - m) / sd, as torchvision computes it (a division, not a multiply).
    for (int64_t i = 0; i < per_channel; ++i) x[i] = (x[i] - m) / sd;
  }
  return absl::OkStatus();
}

}  // namespace lockstep
