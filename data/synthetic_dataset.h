// A synthetic, learnable classification dataset: Gaussian clusters.
//
//   SyntheticOptions options;            // 60000 examples of {1, 28, 28}, 10 classes
//   options.seed = 3;
//   LOCKSTEP_ASSIGN_OR_RETURN(auto data, SyntheticDataset::Create(options));
//
// Each class c has a centre mu_c whose entries are drawn from
// N(0, center_scale^2); example i has label y_i and features mu_{y_i} +
// N(0, noise^2) per entry. Everything is a pure function of (seed, i), so any
// example can be produced on any thread in any order, and two runs (or two
// ranks) with the same seed see identical data. With the defaults the classes
// overlap enough that a model must learn (a linear classifier reaches high
// accuracy; chance is 10%). It is the trainers' embedded default when
// Fashion-MNIST is not installed.
#ifndef LOCKSTEP_DATA_SYNTHETIC_DATASET_H_
#define LOCKSTEP_DATA_SYNTHETIC_DATASET_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace lockstep {

struct SyntheticOptions {
  int64_t size = 60000;
  std::vector<int64_t> example_shape = {1, 28, 28};
  int64_t num_classes = 10;
  uint64_t seed = 0;
  float center_scale = 0.15f;
  float noise = 1.0f;
};

class SyntheticDataset : public Dataset {
 public:
  static absl::StatusOr<std::shared_ptr<SyntheticDataset>> Create(const SyntheticOptions& options);

  int64_t size() const override { return options_.size; }
  std::vector<int64_t> example_shape() const override { return options_.example_shape; }
  int64_t num_classes() const override { return options_.num_classes; }
  absl::Status Get(int64_t index, absl::Span<float> features, int64_t* label) const override;

  // The label of example `index` (no features computed).
  int64_t Label(int64_t index) const;
  // The centre of class c (example_numel() floats).
  absl::Span<const float> Center(int64_t c) const;

 private:
  SyntheticDataset(const SyntheticOptions& options, std::vector<float> centers)
      : options_(options), centers_(std::move(centers)) {}

  SyntheticOptions options_;
  std::vector<float> centers_;  // num_classes x example_numel
};

}  // namespace lockstep

#endif  // LOCKSTEP_DATA_SYNTHETIC_DATASET_H_
