// Classification datasets stored as a pair of IDX files (MNIST format), and
// Fashion-MNIST as Debian's dataset-fashion-mnist package installs it.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(std::shared_ptr<IdxDataset> train,
//                             LoadFashionMnist(kDefaultFashionMnistDir, Split::kTrain));
//   train->size();           // 60000
//   train->example_shape();  // {1, 28, 28}
//
// Images must be u8 with 3 dimensions [N, H, W]; features are pixel / 255
// (torchvision's ToTensor), one channel. Labels must be u8 [N] with values
// below num_classes. A mismatch between the two files, or a label out of
// range, is an error naming the file and the first offending entry.
#ifndef LOCKSTEP_DATA_IDX_DATASET_H_
#define LOCKSTEP_DATA_IDX_DATASET_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "data/idx.h"

namespace lockstep {

inline constexpr char kDefaultFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

enum class Split { kTrain, kTest };

class IdxDataset : public Dataset {
 public:
  static absl::StatusOr<std::shared_ptr<IdxDataset>> Load(const std::string& images_path,
                                                          const std::string& labels_path, int64_t num_classes);
  // From arrays already in memory (validated the same way).
  static absl::StatusOr<std::shared_ptr<IdxDataset>> FromArrays(IdxArray images, IdxArray labels, int64_t num_classes,
                                                                absl::string_view name);

  int64_t size() const override { return size_; }
  std::vector<int64_t> example_shape() const override { return {1, rows_, cols_}; }
  int64_t num_classes() const override { return num_classes_; }
  absl::Status Get(int64_t index, absl::Span<float> features, int64_t* label) const override;

  // The raw pixels and labels, for benchmarks and tools.
  const std::vector<uint8_t>& pixels() const { return images_.data; }
  const std::vector<uint8_t>& labels() const { return labels_.data; }

 private:
  IdxDataset(IdxArray images, IdxArray labels, int64_t num_classes)
      : images_(std::move(images)),
        labels_(std::move(labels)),
        size_(images_.dims[0]),
        rows_(images_.dims[1]),
        cols_(images_.dims[2]),
        num_classes_(num_classes) {}

  IdxArray images_;
  IdxArray labels_;
  int64_t size_, rows_, cols_, num_classes_;
};

// Finds {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] in `dir`.
absl::StatusOr<std::shared_ptr<IdxDataset>> LoadFashionMnist(const std::string& dir, Split split);

}  // namespace lockstep

#endif  // LOCKSTEP_DATA_IDX_DATASET_H_
