// What single_trainer and ddp_trainer share besides the loop: their common
// flags, the models, datasets, optimizer and scaler those flags select, and
// flag parsing that exits with status 2 and the usage on any bad flag.
//
//   int main(int argc, char** argv) {
//     ParseTrainerFlagsOrExit(argc, argv, "single_trainer");
//     absl::StatusOr<TrainerConfig> config = TrainerConfigFromFlags();
//     if (!config.ok()) return UsageError("single_trainer", config.status());  // 2
//     ...
//
// Flags (defaults): --model (mlp | cnn), --epochs (3), --batch_size (64, per
// rank), --lr (0.1), --momentum (0.9, SGD), --optimizer (sgd | adam | adamw),
// --dataset (auto: Fashion-MNIST from Debian's dataset-fashion-mnist when
// installed, else synthetic; fashion-mnist; synthetic; or a directory with
// the four IDX files), --amp (off | fp16 | bf16), --seed (0), --checkpoint_dir,
// --checkpoint_every, --resume, --max_steps, --metrics, --trace, --device
// (cpu | cuda), --num_workers (2), --synthetic_train_size,
// --synthetic_test_size, --freeze, --clip_grad_norm (0: off).
#ifndef LOCKSTEP_TRAINERS_TRAINER_SETUP_H_
#define LOCKSTEP_TRAINERS_TRAINER_SETUP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "amp/grad_scaler.h"
#include "amp/precision_policy.h"
#include "core/device.h"
#include "data/dataset.h"
#include "nn/module.h"
#include "nn/optimizer.h"
#include "trainers/train_loop.h"

namespace lockstep {

struct TrainerConfig {
  std::string model = "mlp";
  int64_t epochs = 3;
  int64_t batch_size = 64;
  double lr = 0.1;
  double momentum = 0.9;
  std::string optimizer = "sgd";
  std::string dataset = "auto";
  int64_t synthetic_train_size = 60000;
  int64_t synthetic_test_size = 10000;
  PrecisionPolicy precision;  // --amp
  bool amp = false;
  uint64_t seed = 0;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  bool resume = false;
  int64_t max_steps = 0;
  std::string metrics;
  std::string trace;
  Device device = Device::Cpu();
  int num_workers = 2;
  std::vector<std::string> freeze;  // --freeze: names or prefixes
  double clip_grad_norm = 0;        // --clip_grad_norm; 0: off
};

// Checks argv against the registered flags (unknown names, values that do
// not parse, positional arguments) and then parses it; on a problem prints it
// and the usage to stderr and exits with status 2. `extra_usage` describes
// the binary's own flags.
void ParseTrainerFlagsOrExit(int argc, char** argv, const char* program, const char* extra_usage);

// The shared flags, validated: InvalidArgument naming the flag.
absl::StatusOr<TrainerConfig> TrainerConfigFromFlags();

// Prints `status` and the usage; returns 2 (main's exit status).
int UsageError(const char* program, const absl::Status& status);

// Every trainer's start: restarts with faster OpenBLAS kernels when the
// library fell back to slow ones (nn/blas_kernels.h), parses the flags and
// reads the shared ones; a bad flag exits with the usage (status 2).
TrainerConfig StartTrainerOrExit(int argc, char** argv, const char* program, const char* extra_usage);

// "<program>: final test accuracy 86.09% (10000 examples), 36168 samples/s
// <where>, 1407 steps", when an epoch completed.
void PrintFinalResult(const char* program, const TrainResult& result, const std::string& where);

struct TrainerDatasets {
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> test;
  std::string description;  // "Fashion-MNIST (/usr/share/...)", "synthetic"
};
absl::StatusOr<TrainerDatasets> LoadTrainerDatasets(const TrainerConfig& config);

// "mlp": Flatten-Linear(784,512)-ReLU-Linear(512,256)-ReLU-Linear(256,10)
// ("mlp:784,A,B,10": those sizes);
// "cnn": Conv(1,32,3,pad 1)-BatchNorm2d-ReLU-MaxPool(2)-Conv(32,64,3,pad 1)-
// BatchNorm2d-ReLU-MaxPool(2)-Flatten-Linear(3136,128)-ReLU-Linear(128,10),
// as nn.Sequential (names "0.weight", ...). Initialized as PyTorch after
// torch.manual_seed(seed). Linear and Conv2d layers compute in
// `compute_dtype` (autocast's lower-precision ops; BatchNorm, ReLU and
// MaxPool then run on their bf16/f16 outputs, as under torch.autocast).
// The layer sizes of --model=mlp:784,...,10.
absl::StatusOr<std::vector<int64_t>> MlpSizes(const std::string& model);

absl::StatusOr<std::unique_ptr<Module>> MakeModel(const std::string& name, uint64_t seed,
                                                  DType compute_dtype, Device device);

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

TrainLoopOptions MakeLoopOptions(const TrainerConfig& config, int rank, int world_size);

// Whether a launcher set this process's rank: RANK (torchrun, tools/launch),
// OMPI_COMM_WORLD_RANK (mpirun) or SLURM_PROCID (srun).
bool HasRankEnvironment();

// A DDP trainer's start without a rank environment: runs `nproc` ranks of
// this binary with the same arguments on this machine under a store this
// process holds (collectives/bootstrap/local_launch.h), each on its own CPU
// with bind_to_core, and stops them all when one fails. Returns main's exit
// status: 0, 1 when a rank failed (the error printed), 2 for nproc < 1.
int RunLocalRanksOfSelf(const char* program, int argc, char** argv, int nproc, bool bind_to_core);

}  // namespace lockstep

#endif  // LOCKSTEP_TRAINERS_TRAINER_SETUP_H_
