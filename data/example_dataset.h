// ExampleDataset: indexed examples made of several tensors of any dtype (a
// window of token ids and its targets, an image and its mask, ...): the
// general form of data/dataset.h's (f32 features, one label), and what the
// DataLoader batches (data/data_loader.h).
//
//   std::shared_ptr<const ExampleDataset> examples = AsExamples(dataset);  // features, label
//   LOCKSTEP_ASSIGN_OR_RETURN(std::vector<Tensor> batch, StackExamples(*examples, {4, 0, 7}, false));
//   // batch[0]: f32 [3, example_shape...], batch[1]: i64 [3]
//   LOCKSTEP_ASSIGN_OR_RETURN(auto loader, DataLoader::Create(examples, sampler, options));
//
// (data/char_corpus.h's CharWindows is another: windows of token ids and
// their targets.) Every example has the same fields (name, dtype, shape);
// Get writes field f
// of example `index` into out[f], exactly fields()[f].nbytes() bytes, and is
// const and safe to call from several threads at once (the DataLoader's
// workers do). CheckExampleArgs is the shared argument check.
//
// Collating: StackExamples is torch's default_collate for tensors: field f
// of a batch of B examples is one tensor [B, shape...] (a scalar field gives
// [B]), example i at row i. A DataLoader takes another CollateFn where a
// batch is more than a stack (padding, packing).
//
// AsExamples views a classification Dataset as two fields, "features" (f32
// [example_shape]) and "label" (i64, a scalar): the same bytes its Get
// writes, so a DataLoader over either gives the same batches.
#ifndef LOCKSTEP_DATA_EXAMPLE_DATASET_H_
#define LOCKSTEP_DATA_EXAMPLE_DATASET_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "data/dataset.h"

namespace lockstep {

struct ExampleField {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // of one example; {} is a scalar
  int64_t numel() const;
  int64_t nbytes() const { return numel() * static_cast<int64_t>(DTypeSize(dtype)); }
};

class ExampleDataset {
 public:
  virtual ~ExampleDataset() = default;
  virtual int64_t size() const = 0;
  virtual std::vector<ExampleField> fields() const = 0;
  virtual absl::Status Get(int64_t index, absl::Span<const absl::Span<char>> out) const = 0;
};

// An index outside [0, size()), or `out` not one span of each field's
// nbytes(), is an error naming `name`, the index and what was expected.
absl::Status CheckExampleArgs(const ExampleDataset& dataset, const char* name, int64_t index,
                              absl::Span<const absl::Span<char>> out);

// Makes one batch of `indices` (in that order) of `dataset`; pinned: the
// tensors in page-locked memory where a GPU is visible (core/tensor.h).
using CollateFn = std::function<absl::StatusOr<std::vector<Tensor>>(const ExampleDataset& dataset,
                                                                    absl::Span<const int64_t> indices, bool pinned)>;

// The default CollateFn (see above). An example's error comes back naming
// the example: "example 17: ...".
absl::StatusOr<std::vector<Tensor>> StackExamples(const ExampleDataset& dataset, absl::Span<const int64_t> indices,
                                                  bool pinned);

std::shared_ptr<const ExampleDataset> AsExamples(std::shared_ptr<const Dataset> dataset);

}  // namespace lockstep

#endif  // LOCKSTEP_DATA_EXAMPLE_DATASET_H_
