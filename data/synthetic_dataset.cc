#include "data/synthetic_dataset.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

// SplitMix64: a counter-based generator, so example i needs no state from
// examples before it.
uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A stream of standard normals from (key, counter) via Box-Muller.
class NormalStream {
 public:
  explicit NormalStream(uint64_t key) : key_(key) {}

  float Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    // 53-bit uniforms in (0, 1].
    const double u1 = (static_cast<double>(SplitMix64(key_ + counter_++) >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(SplitMix64(key_ + counter_++) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double theta = 2.0 * 3.14159265358979323846 * u2;
    spare_ = static_cast<float>(r * std::sin(theta));
    has_spare_ = true;
    return static_cast<float>(r * std::cos(theta));
  }

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
  float spare_ = 0;
  bool has_spare_ = false;
};

// Distinct key spaces for centres, labels and per-example noise.
uint64_t Key(uint64_t seed, uint64_t kind, uint64_t index) {
  return SplitMix64(SplitMix64(seed ^ (kind << 56)) ^ index) << 20;
}

}  // namespace

absl::StatusOr<std::shared_ptr<SyntheticDataset>> SyntheticDataset::Create(const SyntheticOptions& options) {
  if (options.size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("SyntheticDataset: size = ", options.size, "; it must be at least 1"));
  }
  if (options.num_classes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("SyntheticDataset: num_classes = ", options.num_classes, "; it must be at least 1"));
  }
  int64_t numel = 1;
  for (int64_t d : options.example_shape) {
    if (d < 1 || numel > (int64_t{1} << 24) / d) {
      return absl::InvalidArgumentError(
          "SyntheticDataset: example_shape needs positive dimensions and at most 2^24 elements");
    }
    numel *= d;
  }
  if (!(options.noise >= 0) || !(options.center_scale >= 0)) {
    return absl::InvalidArgumentError("SyntheticDataset: noise and center_scale must be >= 0");
  }
  std::vector<float> centers(static_cast<size_t>(options.num_classes * numel));
  for (int64_t c = 0; c < options.num_classes; ++c) {
    NormalStream normal(Key(options.seed, 1, static_cast<uint64_t>(c)));
    for (int64_t j = 0; j < numel; ++j) centers[c * numel + j] = options.center_scale * normal.Next();
  }
  return std::shared_ptr<SyntheticDataset>(new SyntheticDataset(options, std::move(centers)));
}

int64_t SyntheticDataset::Label(int64_t index) const {
  return static_cast<int64_t>(SplitMix64(Key(options_.seed, 2, static_cast<uint64_t>(index))) %
                              static_cast<uint64_t>(options_.num_classes));
}

absl::Span<const float> SyntheticDataset::Center(int64_t c) const {
  const int64_t numel = example_numel();
  return absl::MakeConstSpan(centers_).subspan(static_cast<size_t>(c * numel), static_cast<size_t>(numel));
}

absl::Status SyntheticDataset::Get(int64_t index, absl::Span<float> features, int64_t* label) const {
  absl::Status s = CheckGetArgs(*this, "SyntheticDataset", index, features, label);
  if (!s.ok()) return s;
  *label = Label(index);
  absl::Span<const float> center = Center(*label);
  NormalStream normal(Key(options_.seed, 3, static_cast<uint64_t>(index)));
  for (size_t j = 0; j < features.size(); ++j) features[j] = center[j] + options_.noise * normal.Next();
  return absl::OkStatus();
}

}  // namespace lockstep
