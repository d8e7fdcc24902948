#include "data/idx_dataset.h"

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lockstep {
namespace {

bool FileExists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// `base` or `base.gz`, whichever exists.
absl::StatusOr<std::string> FindFile(const std::string& dir, const std::string& base) {
  for (const std::string& candidate : {dir + "/" + base + ".gz", dir + "/" + base}) {
    if (FileExists(candidate)) return candidate;
  }
  return absl::NotFoundError(
      absl::StrCat("Fashion-MNIST: neither ", dir, "/", base, ".gz nor ", dir, "/", base,
                   " exists. Install Debian's dataset-fashion-mnist (bash tools/setup.sh does) or point ",
                   "the data directory flag at the four IDX files"));
}

}  // namespace

absl::StatusOr<std::shared_ptr<IdxDataset>> IdxDataset::FromArrays(IdxArray images, IdxArray labels,
                                                                   int64_t num_classes, absl::string_view name) {
  if (images.type != IdxType::kU8 || images.dims.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": images must be u8 with 3 dimensions [N, rows, cols]; found ", IdxTypeName(images.type),
                     " [", absl::StrJoin(images.dims, ", "), "]"));
  }
  if (labels.type != IdxType::kU8 || labels.dims.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": labels must be u8 with 1 dimension [N]; found ",
                                                   IdxTypeName(labels.type), " [", absl::StrJoin(labels.dims, ", "),
                                                   "]"));
  }
  if (images.dims[0] != labels.dims[0]) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", images.dims[0], " images but ", labels.dims[0], " labels"));
  }
  if (num_classes < 1 || num_classes > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": num_classes = ", num_classes, " is outside 1..256 (u8 labels)"));
  }
  for (size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= num_classes) {
      return absl::DataLossError(
          absl::StrCat(name, ": label ", i, " is ", int{labels.data[i]}, ", outside [0, ", num_classes, ")"));
    }
  }
  return std::shared_ptr<IdxDataset>(new IdxDataset(std::move(images), std::move(labels), num_classes));
}

absl::StatusOr<std::shared_ptr<IdxDataset>> IdxDataset::Load(const std::string& images_path,
                                                             const std::string& labels_path, int64_t num_classes) {
  absl::StatusOr<IdxArray> images = ReadIdxFile(images_path);
  if (!images.ok()) return images.status();
  absl::StatusOr<IdxArray> labels = ReadIdxFile(labels_path);
  if (!labels.ok()) return labels.status();
  return FromArrays(*std::move(images), *std::move(labels), num_classes, absl::StrCat(images_path, " + ", labels_path));
}

absl::Status IdxDataset::Get(int64_t index, absl::Span<float> features, int64_t* label) const {
  absl::Status s = CheckGetArgs(*this, "IdxDataset", index, features, label);
  if (!s.ok()) return s;
  const int64_t n = rows_ * cols_;
  // __restrict: bytes may alias anything, and without it the loop stays
  // scalar.
  const uint8_t* __restrict pixels = images_.data.data() + index * n;
  float* __restrict out = features.data();
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(pixels[i]) / 255.0f;
  *label = labels_.data[static_cast<size_t>(index)];
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<IdxDataset>> LoadFashionMnist(const std::string& dir, Split split) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  absl::StatusOr<std::string> images = FindFile(dir, prefix + "-images-idx3-ubyte");
  if (!images.ok()) return images.status();
  absl::StatusOr<std::string> labels = FindFile(dir, prefix + "-labels-idx1-ubyte");
  if (!labels.ok()) return labels.status();
  return IdxDataset::Load(*images, *labels, 10);
}

}  // namespace lockstep
