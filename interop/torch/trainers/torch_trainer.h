// What the libtorch reference trainers (resnet18_trainer,
// char_transformer_trainer) share: the trainers' flags and loop
// (trainers/trainer_setup.h, trainers/train_loop.h) around a libtorch model
// (interop/torch/bridge/torch_module.h) under interop/torch's
// DistributedDataParallel (torch_ddp_stepper.h), started as ddp_trainer
// starts: --nproc local ranks without a rank environment, one rank under
// tools/launch, torchrun, mpirun or srun.
//
//   int main(int argc, char** argv) {
//     TorchTrainerInfo info;
//     info.program = "resnet18_trainer";
//     return TorchTrainerMain(argc, argv, info, [](const TrainerConfig& config) -> absl::StatusOr<TorchTrainerSpec> {
//       TorchTrainerSpec spec;
//       spec.make_model = ...;                 // the libtorch model, seeded
//       spec.train = ...;  spec.test = ...;    // ExampleDatasets: input, targets
//       return spec;
//     });
//   }
//
// Flags: the shared ones (--epochs, --batch_size per rank, --lr, --momentum,
// --optimizer, --seed, --num_workers, --checkpoint_dir, --checkpoint_every,
// --resume, --max_steps, --metrics, --trace, --clip_grad_norm,
// --grad_accum_steps, --log_every; --model, --amp, --device and --freeze do
// not apply and are refused), plus --nproc, --bind_to, --bucket_cap_mb,
// --first_bucket_mb, --timeout and --fsdp (fully sharded data parallel,
// interop/torch/fsdp, instead of DDP: the optimizer steps each rank's
// shards, evaluation and checkpoints gather the whole model for their
// duration, and the checkpoints are DDP's files). The last line rank 0 prints is the step
// time's breakdown (PrintStepBreakdown).
// libtorch and OpenBLAS run one intra-op thread per rank unless
// OMP_NUM_THREADS says otherwise. A run stopped by --max_steps in the middle
// of an epoch is evaluated on the test set before it ends.
#ifndef LOCKSTEP_INTEROP_TORCH_TRAINERS_TORCH_TRAINER_H_
#define LOCKSTEP_INTEROP_TORCH_TRAINERS_TORCH_TRAINER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/example_dataset.h"
#include "interop/torch/bridge/torch_module.h"
#include "trainers/trainer_setup.h"

namespace lockstep {
namespace interop {

struct TorchTrainerSpec {
  // The model on every rank, from the run's seed (every rank builds the same;
  // DDP broadcasts rank 0's anyway); `sharded` (--fsdp): its blocks built as
  // FSDP units (interop/torch/fsdp/sharded_unit.h), with the same names and
  // initial values.
  std::function<absl::StatusOr<std::unique_ptr<TorchModule>>(uint64_t seed, bool sharded)> make_model;
  std::string model_description;  // "ResNet-18 (width 64)"
  // Field 0 the input, field 1 the targets.
  std::shared_ptr<const ExampleDataset> train, test;
  std::string data_description;
  // Into every checkpoint, checked on resume (a vocabulary, the model's sizes).
  std::map<std::string, std::string> checkpoint_metadata;
  bool language_model = false;  // perplexity in the lines and metrics
  // Rank 0, after training (a generated sample).
  std::function<absl::Status(TorchModule& model)> after_training;
};

struct TorchTrainerInfo {
  const char* program = "";
  const char* extra_usage = "";  // The binary's own flags, for the usage.
  // Shared flags' defaults for this trainer ({"lr", "0.001"}): the command
  // line still overrides them.
  std::vector<std::pair<std::string, std::string>> defaults;
  // Shared flags this trainer does not use, refused when given.
  std::vector<std::string> unused_flags;
};

using MakeTorchTrainerSpec = std::function<absl::StatusOr<TorchTrainerSpec>(const TrainerConfig& config)>;

// The whole main(): flags (a bad one exits 2 with the usage), the spec
// (InvalidArgument: a usage error, 2; another error, e.g. a missing
// dataset: printed, 1), then the local ranks or this rank.
int TorchTrainerMain(int argc, char** argv, const TorchTrainerInfo& info, const MakeTorchTrainerSpec& make_spec);

}  // namespace interop
}  // namespace lockstep

#endif  // LOCKSTEP_INTEROP_TORCH_TRAINERS_TORCH_TRAINER_H_
