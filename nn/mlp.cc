#include "nn/mlp.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "nn/dropout.h"
#include "nn/flatten.h"
#include "nn/linear.h"
#include "nn/relu.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<Sequential>> MakeMlp(const MlpOptions& options, Mt19937& gen) {
  if (options.sizes.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("MakeMlp: sizes needs at least the input and output sizes, got ",
                                                   options.sizes.size(), " entries"));
  }
  auto model = std::make_unique<Sequential>();
  if (options.flatten) model->Add(std::make_unique<Flatten>());
  const size_t layers = options.sizes.size() - 1;
  for (size_t k = 0; k < layers; ++k) {
    LinearOptions linear;
    linear.in_features = options.sizes[k];
    linear.out_features = options.sizes[k + 1];
    linear.compute_dtype = options.compute_dtype;
    linear.device = options.device;
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Linear> fc, Linear::Create(linear, gen));
    model->Add(std::move(fc));
    if (k + 1 < layers) {
      model->Add(std::make_unique<ReLU>());
      if (options.dropout > 0.0) {
        model->Add(std::make_unique<Dropout>(options.dropout, options.dropout_seed + k));
      }
    }
  }
  return model;
}

}  // namespace lockstep
