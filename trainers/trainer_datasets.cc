#include "trainers/trainer_datasets.h"

#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "data/idx_dataset.h"
#include "data/normalize.h"
#include "data/synthetic_dataset.h"

namespace lockstep {
namespace {

// A [begin, begin + size) view of another dataset: the synthetic test split
// shares the training split's class centres.
class RangeDataset : public Dataset {
 public:
  RangeDataset(std::shared_ptr<const Dataset> base, int64_t begin, int64_t size)
      : base_(std::move(base)), begin_(begin), size_(size) {}
  int64_t size() const override { return size_; }
  std::vector<int64_t> example_shape() const override { return base_->example_shape(); }
  int64_t num_classes() const override { return base_->num_classes(); }
  absl::Status Get(int64_t index, absl::Span<float> features, int64_t* label) const override {
    LOCKSTEP_RETURN_IF_ERROR(CheckGetArgs(*this, "RangeDataset", index, features, label));
    return base_->Get(begin_ + index, features, label);
  }

 private:
  std::shared_ptr<const Dataset> base_;
  int64_t begin_, size_;
};

absl::StatusOr<TrainerDatasets> FashionMnist(const std::string& dir) {
  TrainerDatasets d;
  LOCKSTEP_ASSIGN_OR_RETURN(std::shared_ptr<IdxDataset> train, LoadFashionMnist(dir, Split::kTrain));
  LOCKSTEP_ASSIGN_OR_RETURN(std::shared_ptr<IdxDataset> test, LoadFashionMnist(dir, Split::kTest));
  LOCKSTEP_ASSIGN_OR_RETURN(d.train, Normalize::Create(train, {kFashionMnistMean}, {kFashionMnistStd}));
  LOCKSTEP_ASSIGN_OR_RETURN(d.test, Normalize::Create(test, {kFashionMnistMean}, {kFashionMnistStd}));
  d.description = absl::StrCat("Fashion-MNIST (", dir, ")");
  return d;
}

absl::StatusOr<TrainerDatasets> Synthetic(const TrainerConfig& c) {
  SyntheticOptions options;
  options.size = c.synthetic_train_size + c.synthetic_test_size;
  options.seed = 1234;  // The data stays the same whatever --seed is.
  LOCKSTEP_ASSIGN_OR_RETURN(std::shared_ptr<SyntheticDataset> all, SyntheticDataset::Create(options));
  TrainerDatasets d;
  d.train = std::make_shared<RangeDataset>(all, 0, c.synthetic_train_size);
  d.test = std::make_shared<RangeDataset>(all, c.synthetic_train_size, c.synthetic_test_size);
  d.description = absl::StrCat("synthetic (", c.synthetic_train_size, " train, ", c.synthetic_test_size, " test)");
  return d;
}

}  // namespace

absl::StatusOr<TrainerDatasets> LoadTrainerDatasets(const TrainerConfig& c) {
  if (c.dataset == "synthetic") return Synthetic(c);
  if (c.dataset == "auto") {
    absl::StatusOr<TrainerDatasets> fashion = FashionMnist(kDefaultFashionMnistDir);
    if (fashion.ok()) return fashion;
    if (!absl::IsNotFound(fashion.status())) return fashion.status();  // installed but broken
    absl::StatusOr<TrainerDatasets> synthetic = Synthetic(c);
    if (synthetic.ok()) {
      synthetic->description +=
          absl::StrCat("; Fashion-MNIST is not in ", kDefaultFashionMnistDir, " (bash tools/setup.sh installs it)");
    }
    return synthetic;
  }
  const std::string dir = c.dataset == "fashion-mnist" ? kDefaultFashionMnistDir : c.dataset;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(
        "--dataset=", c.dataset, ": ", dir, " is not a directory. Give fashion-mnist (", kDefaultFashionMnistDir,
        ", from Debian's dataset-fashion-mnist: bash tools/setup.sh), "
        "synthetic, auto, or a directory holding {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]"));
  }
  return FashionMnist(dir);
}

}  // namespace lockstep
