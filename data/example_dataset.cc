#include "data/example_dataset.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lockstep {
namespace {

class ClassificationExamples final : public ExampleDataset {
 public:
  explicit ClassificationExamples(std::shared_ptr<const Dataset> dataset)
      : dataset_(std::move(dataset)), shape_(dataset_->example_shape()), numel_(dataset_->example_numel()) {}
  int64_t size() const override { return dataset_->size(); }
  std::vector<ExampleField> fields() const override {
    return {{"features", DType::kF32, shape_}, {"label", DType::kI64, {}}};
  }
  absl::Status Get(int64_t index, absl::Span<const absl::Span<char>> out) const override {
    if (out.size() != 2 || out[1].size() != sizeof(int64_t) ||
        out[0].size() != static_cast<size_t>(numel_) * sizeof(float)) {
      return CheckExampleArgs(*this, "AsExamples", index, out);
    }
    // The caller's buffers are the batch tensors' rows: aligned for their dtypes.
    return dataset_->Get(index, absl::MakeSpan(reinterpret_cast<float*>(out[0].data()), out[0].size() / sizeof(float)),
                         reinterpret_cast<int64_t*>(out[1].data()));
  }

 private:
  std::shared_ptr<const Dataset> dataset_;
  // A Dataset's example shape is fixed: asked once, not per example.
  const std::vector<int64_t> shape_;
  const int64_t numel_;
};

}  // namespace

int64_t ExampleField::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::Status CheckExampleArgs(const ExampleDataset& dataset, const char* name, int64_t index,
                              absl::Span<const absl::Span<char>> out) {
  if (index < 0 || index >= dataset.size()) {
    return absl::OutOfRangeError(absl::StrCat(name, ": index ", index, " is outside [0, ", dataset.size(), ")"));
  }
  const std::vector<ExampleField> fields = dataset.fields();
  bool ok = out.size() == fields.size();
  for (size_t f = 0; ok && f < fields.size(); ++f) ok = static_cast<int64_t>(out[f].size()) == fields[f].nbytes();
  if (!ok) {
    std::vector<std::string> want, got;
    for (const ExampleField& f : fields) want.push_back(absl::StrCat(f.name, " ", f.nbytes()));
    for (const absl::Span<char>& s : out) got.push_back(absl::StrCat(s.size()));
    return absl::InvalidArgumentError(absl::StrCat(name, ": example ", index, " needs ", fields.size(),
                                                   " buffers of bytes [", absl::StrJoin(want, ", "), "]; got [",
                                                   absl::StrJoin(got, ", "), "]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> StackExamples(const ExampleDataset& dataset, absl::Span<const int64_t> indices,
                                                  bool pinned) {
  const std::vector<ExampleField> fields = dataset.fields();
  const int64_t b = static_cast<int64_t>(indices.size());
  std::vector<Tensor> batch;
  std::vector<char*> base;
  for (const ExampleField& f : fields) {
    std::vector<int64_t> shape = f.shape;
    shape.insert(shape.begin(), b);
    absl::StatusOr<Tensor> t = Tensor::Empty(shape, f.dtype, Device::Cpu(), pinned);
    if (!t.ok()) return t.status();
    base.push_back(static_cast<char*>(t->raw_data()));
    batch.push_back(*std::move(t));
  }
  std::vector<absl::Span<char>> rows(fields.size());
  for (int64_t i = 0; i < b; ++i) {
    for (size_t f = 0; f < fields.size(); ++f) {
      const int64_t n = fields[f].nbytes();
      rows[f] = absl::Span<char>(base[f] + i * n, static_cast<size_t>(n));
    }
    const absl::Status s = dataset.Get(indices[i], rows);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("example ", indices[i], ": ", s.message()));
  }
  return batch;
}

std::shared_ptr<const ExampleDataset> AsExamples(std::shared_ptr<const Dataset> dataset) {
  return std::make_shared<ClassificationExamples>(std::move(dataset));
}

}  // namespace lockstep
