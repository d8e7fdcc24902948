// Dataset: indexed (features, label) examples for classification.
//
//   const Dataset& d = ...;
//   std::vector<float> x(d.example_numel());
//   int64_t y;
//   LOCKSTEP_RETURN_IF_ERROR(d.Get(17, absl::MakeSpan(x), &y));
//
// Features are f32 in the shape example_shape() (e.g. {1, 28, 28}); labels
// are class numbers in [0, num_classes()). Get() is const and must be safe to
// call from several threads at once: the DataLoader's workers do.
#ifndef LOCKSTEP_DATA_DATASET_H_
#define LOCKSTEP_DATA_DATASET_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace lockstep {

class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual int64_t size() const = 0;
  virtual std::vector<int64_t> example_shape() const = 0;
  virtual int64_t num_classes() const = 0;

  // Writes example `index` into `features` (exactly example_numel() floats)
  // and its class into `*label`. An index outside [0, size()) or a wrong
  // span size is an error.
  virtual absl::Status Get(int64_t index, absl::Span<float> features, int64_t* label) const = 0;

  int64_t example_numel() const {
    int64_t n = 1;
    for (int64_t d : example_shape()) n *= d;
    return n;
  }
};

// The shared argument check of Get() implementations.
absl::Status CheckGetArgs(const Dataset& dataset, const char* name, int64_t index, absl::Span<float> features,
                          const int64_t* label);

}  // namespace lockstep

#endif  // LOCKSTEP_DATA_DATASET_H_
