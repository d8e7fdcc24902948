// The training loop's checkpoints: what it writes beside the model, the
// optimizer and the GradScaler (the batch position and the epoch's running
// sums, nn/checkpoint/checkpoint.h metadata), and how a run finds and restores the
// newest one that loads. Internal to //trainers:train_loop (ListCheckpoints
// is public, in train_loop.h).
#ifndef LOCKSTEP_TRAINERS_CHECKPOINT_RESTORE_H_
#define LOCKSTEP_TRAINERS_CHECKPOINT_RESTORE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "amp/grad_scaler.h"
#include "nn/module.h"
#include "nn/optimizer.h"
#include "trainers/train_loop.h"

namespace lockstep {
namespace train_loop_internal {

// Where a run stood when its checkpoint was written.
struct Position {
  int64_t epoch = 0;
  int64_t batch = 0;  // Batches done in `epoch`.
  int64_t step = 0;
  EvalCounts carried;  // The epoch's sums so far, over all ranks.
};

// Writes "<checkpoint_dir>/step-<10-digit step>.safetensors" (atomic), then
// removes all but the two newest that look loadable (a regular file whose
// header is complete and whose metadata has the step of its name): a
// damaged file, or a FIFO, directory or symlink named like a checkpoint,
// is neither counted nor removed (it is reported on stderr).
absl::Status SaveTrainerCheckpoint(const TrainLoopOptions& o, const Position& at, Module& model, Optimizer& optimizer,
                                   const GradScaler& scaler);

struct Restored {
  std::string path;
  Position at;
};

// Restores the newest checkpoint that loads (an unreadable one is skipped,
// with a line on stderr: writes are atomic, so it is foreign or damaged);
// nullopt when there is no regular file named like a checkpoint, a
// DataLossError listing each file's problem when there are some but none
// loads. Entries that are not regular files (FIFO, directory, symlink,
// socket) are never opened: reported on stderr and ignored. A checkpoint of
// another batch size, world size or seed is an error that says so.
absl::StatusOr<std::optional<Restored>> RestoreTrainerCheckpoint(const TrainLoopOptions& o, Module& model,
                                                                 Optimizer& optimizer, GradScaler& scaler,
                                                                 int64_t batches);

}  // namespace train_loop_internal
}  // namespace lockstep

#endif  // LOCKSTEP_TRAINERS_CHECKPOINT_RESTORE_H_
