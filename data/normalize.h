// Normalize: a dataset whose features are (x - mean[c]) / std[c] per channel
// c (dimension 0 of the example shape), like torchvision.transforms.Normalize.
//
//   // Fashion-MNIST's usual statistics:
//   LOCKSTEP_ASSIGN_OR_RETURN(auto normalized,
//       Normalize::Create(train, /*mean=*/{0.2860f}, /*std=*/{0.3530f}));
//
// One mean/std value applies to every channel; otherwise give one per channel.
#ifndef LOCKSTEP_DATA_NORMALIZE_H_
#define LOCKSTEP_DATA_NORMALIZE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace lockstep {

inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;

class Normalize : public Dataset {
 public:
  static absl::StatusOr<std::shared_ptr<Normalize>> Create(std::shared_ptr<const Dataset> base, std::vector<float> mean,
                                                           std::vector<float> std);

  int64_t size() const override { return base_->size(); }
  std::vector<int64_t> example_shape() const override { return base_->example_shape(); }
  int64_t num_classes() const override { return base_->num_classes(); }
  absl::Status Get(int64_t index, absl::Span<float> features, int64_t* label) const override;

 private:
  Normalize(std::shared_ptr<const Dataset> base, std::vector<float> mean, std::vector<float> std)
      : base_(std::move(base)), mean_(std::move(mean)), std_(std::move(std)) {}

  std::shared_ptr<const Dataset> base_;
  std::vector<float> mean_, std_;  // One per channel.
};

}  // namespace lockstep

#endif  // LOCKSTEP_DATA_NORMALIZE_H_
