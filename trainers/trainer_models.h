// The models the trainers' flags select (--model, --freeze), and what trains
// them: the optimizer (--optimizer, --lr, --momentum) and the loss scaler
// (--amp). Initialized as PyTorch's would be after torch.manual_seed(seed),
// so a run can be compared with a PyTorch one parameter for parameter.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Module> model,
//                             MakeModel(config.model, config.seed, config.precision.compute_dtype, config.device));
//   LOCKSTEP_RETURN_IF_ERROR(FreezeParameters(config, *model));
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, MakeOptimizer(config, *model));
//   LOCKSTEP_ASSIGN_OR_RETURN(GradScaler scaler, MakeGradScaler(config));
#ifndef LOCKSTEP_TRAINERS_TRAINER_MODELS_H_
#define LOCKSTEP_TRAINERS_TRAINER_MODELS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "amp/grad_scaler.h"
#include "core/device.h"
#include "core/dtype.h"
#include "nn/module.h"
#include "nn/optimizer.h"
#include "trainers/trainer_flags.h"

namespace lockstep {

// "mlp": Flatten-Linear(784,512)-ReLU-Linear(512,256)-ReLU-Linear(256,10)
// ("mlp:784,A,B,10": those sizes, MlpSizes);
// "cnn": Conv(1,32,3,pad 1)-BatchNorm2d-ReLU-MaxPool(2)-Conv(32,64,3,pad 1)-
// BatchNorm2d-ReLU-MaxPool(2)-Flatten-Linear(3136,128)-ReLU-Linear(128,10),
// as nn.Sequential (names "0.weight", ...). Initialized as PyTorch after
// torch.manual_seed(seed). Linear and Conv2d layers compute in
// `compute_dtype` (autocast's lower-precision ops; BatchNorm, ReLU and
// MaxPool then run on their bf16/f16 outputs, as under torch.autocast).
absl::StatusOr<std::unique_ptr<Module>> MakeModel(const std::string& name, uint64_t seed, DType compute_dtype,
                                                  Device device);

// --freeze: requires_grad false for the parameters it names (Module::
// SetRequiresGrad); InvalidArgument naming the flag when a name matches
// nothing (with the model's names) or when nothing would be left to train.
absl::Status FreezeParameters(const TrainerConfig& config, Module& model);
// ", convolutions oneDNN 2.6.3 (avx512_core)" for a model with convolutions
// (what runs them on its device), else "": for the start-up lines.
std::string ConvolutionKernelsNote(const TrainerConfig& config);

// The same on a CPU copy of the model, before any rank starts
// (StartTrainerOrExit calls it).
absl::Status CheckModelFlags(const TrainerConfig& config);

absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const TrainerConfig& config, Module& model);
// The same over given parameters (a ZeroRedundancyOptimizer's shard).
absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizerFor(const TrainerConfig& config,
                                                            std::vector<NamedParameter> params);

// Enabled only for fp16 (bf16 has f32's range).
absl::StatusOr<GradScaler> MakeGradScaler(const TrainerConfig& config);

}  // namespace lockstep

#endif  // LOCKSTEP_TRAINERS_TRAINER_MODELS_H_
