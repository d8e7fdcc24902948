// A multilayer perceptron as nn.Sequential: [Flatten], Linear, ReLU,
// [Dropout], Linear, ReLU, ..., Linear -- the model of the reference
// trainers and benchmarks.
//
//   Mt19937 gen(0);
//   MlpOptions options;
//   options.sizes = {784, 512, 256, 10};
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> mlp, MakeMlp(options, gen));
//
// Its PyTorch twin, initialized identically after torch.manual_seed(0):
//   nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(),
//                 nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
// with parameter names "1.weight", "1.bias", "3.weight", ...
#ifndef LOCKSTEP_NN_MLP_H_
#define LOCKSTEP_NN_MLP_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/mt19937.h"
#include "nn/sequential.h"

namespace lockstep {

struct MlpOptions {
  // Input features, hidden sizes..., classes (at least two entries).
  std::vector<int64_t> sizes;
  bool flatten = true;        // a leading Flatten (images [N, 1, 28, 28] in)
  double dropout = 0.0;       // > 0 adds Dropout after each hidden ReLU
  uint64_t dropout_seed = 0;  // layer k uses dropout_seed + k
  DType compute_dtype = DType::kF32;
  Device device = Device::Cpu();
};

absl::StatusOr<std::unique_ptr<Sequential>> MakeMlp(const MlpOptions& options, Mt19937& gen);

}  // namespace lockstep

#endif  // LOCKSTEP_NN_MLP_H_
