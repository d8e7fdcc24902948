// The flags every reference trainer shares (single_trainer, dp_trainer,
// ddp_trainer and libtorch's in interop/torch/trainers), read into a
// validated TrainerConfig, and flag parsing that exits with status 2 and the
// usage on any bad flag (absl's own parser exits with 1).
//
//   int main(int argc, char** argv) {
//     ParseTrainerFlagsOrExit(argc, argv, "single_trainer", "");
//     absl::StatusOr<TrainerConfig> config = TrainerConfigFromFlags();
//     if (!config.ok()) return UsageError("single_trainer", config.status());  // 2
//     ...
//
// StartTrainerOrExit (trainer_setup.h) does both and also checks the flags
// that name the model's parts.
//
// Flags (defaults): --model (mlp | mlp:784,H,...,10 | cnn), --epochs (3),
// --batch_size (64, per rank), --lr (0.1), --momentum (0.9, SGD), --optimizer
// (sgd | adam | adamw), --dataset (auto: Fashion-MNIST from Debian's
// dataset-fashion-mnist when installed, else synthetic; fashion-mnist;
// synthetic; or a directory with the four IDX files), --amp (off | fp16 |
// bf16), --seed (0), --checkpoint_dir, --checkpoint_every, --resume,
// --max_steps, --metrics, --trace, --device (cpu | cuda), --num_workers (2),
// --synthetic_train_size, --synthetic_test_size, --freeze, --clip_grad_norm
// (0: off), --grad_accum_steps (1), --log_every (0: none), --device_prefetch
// (true; CUDA only).
#ifndef LOCKSTEP_TRAINERS_TRAINER_FLAGS_H_
#define LOCKSTEP_TRAINERS_TRAINER_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "amp/precision_policy.h"
#include "core/device.h"

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
  int64_t grad_accum_steps = 1;     // --grad_accum_steps: micro-batches per optimizer step
  int64_t log_every = 0;            // --log_every: a "step" line every N steps; 0: none
  bool device_prefetch = true;      // --device_prefetch (CUDA)
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

// The layer sizes of --model=mlp:784,...,10 (InvalidArgument naming the
// flag otherwise); TrainerConfigFromFlags checks them, MakeModel
// (trainer_models.h) builds them.
absl::StatusOr<std::vector<int64_t>> MlpSizes(const std::string& model);

}  // namespace lockstep

#endif  // LOCKSTEP_TRAINERS_TRAINER_FLAGS_H_
