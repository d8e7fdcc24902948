// Training checkpoints in the safetensors format: the model under its
// PyTorch state-dict names, the optimizer's state, and what a resumed run
// needs (epoch, step, seed, plus any string metadata such as GradScaler's).
//
//   TrainingProgress progress;
//   progress.epoch = 3;
//   progress.step = 1400;
//   LOCKSTEP_RETURN_IF_ERROR(SaveCheckpoint("/ckpt/last.safetensors", *model, optimizer.get(),
//                                           progress, scaler.StateToMetadata("scaler.")));
//   ...
//   LOCKSTEP_ASSIGN_OR_RETURN(LoadedCheckpoint loaded,
//                             LoadCheckpoint("/ckpt/last.safetensors", *model, optimizer.get()));
//   LOCKSTEP_RETURN_IF_ERROR(scaler.LoadStateFromMetadata(loaded.metadata, "scaler."));
//
// Layout of the file:
//   * "<name>" for every model state-dict entry (e.g. "1.weight"): no
//     "module." prefix, so PyTorch reads the model part with
//     `{k: v for k, v in load_file(path).items() if "/" not in k}` and
//     `model.load_state_dict(...)`; SaveModel writes only these, loadable
//     as they are.
//   * "optimizer/state.<index>.<key>" for the optimizer's state (see
//     nn/optimizer.h); PyTorch module names never contain '/'.
//   * metadata: "lockstep.checkpoint" = "1", "progress.epoch",
//     "progress.step", "progress.seed", "optimizer.type",
//     "optimizer.<hyperparameter>", "module.<path>.<key>" for the modules'
//     extra state (e.g. a Dropout's mask counter), then the caller's entries.
// Writes are atomic (core/atomic_file.h): a crash mid-write leaves the
// previous checkpoint intact. Loading validates the whole file first and
// changes nothing (model or optimizer) unless everything fits.
#ifndef LOCKSTEP_NN_CHECKPOINT_CHECKPOINT_H_
#define LOCKSTEP_NN_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/atomic_file.h"
#include "nn/checkpoint/safetensors.h"
#include "nn/module.h"
#include "nn/optimizer.h"

namespace lockstep {

struct TrainingProgress {
  int64_t epoch = 0;  // the epoch to run next
  int64_t step = 0;   // optimizer steps done so far
  uint64_t seed = 0;  // the run's base seed (sampler, dropout)
};

struct LoadedCheckpoint {
  TrainingProgress progress;
  // All string metadata of the file (including the caller's entries).
  std::map<std::string, std::string> metadata;
};

// `optimizer` may be null (then no optimizer entries are written). Metadata
// keys of `extra_metadata` must not collide with the reserved ones above
// (lockstep.checkpoint, progress.*, optimizer.*, module.*).
absl::Status SaveCheckpoint(const std::string& path, Module& model, const Optimizer* optimizer,
                            const TrainingProgress& progress,
                            const std::map<std::string, std::string>& extra_metadata = {},
                            const AtomicWriteOptions& options = {});

// Restores `model` (strictly: every name, shape and dtype must match) and,
// when not null, `optimizer`; a file with optimizer state loaded with a null
// optimizer is fine (the state is ignored), but an optimizer type mismatch
// is an error. Only a regular file is read (see ReadSafetensorsFile).
absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& path, Module& model, Optimizer* optimizer,
                                                const SafetensorsReadOptions& read = {});

// A checkpoint's progress and metadata from its header alone, validated as
// LoadCheckpoint validates them (the header against the file's size, so a
// truncated file is an error; a lockstep checkpoint's metadata); the tensors
// are neither read nor matched against a model. For choosing which
// checkpoints to keep without loading them.
absl::StatusOr<LoadedCheckpoint> ReadCheckpointInfo(const std::string& path, const SafetensorsReadOptions& read = {});

// Only the model's state dict, names exactly as PyTorch's model.state_dict().
absl::Status SaveModel(const std::string& path, Module& model, const AtomicWriteOptions& options = {});
// Loads such a file, or one saved from a PyTorch DDP/DataParallel wrapper
// ("module."-prefixed names).
absl::Status LoadModel(const std::string& path, Module& model);

}  // namespace lockstep

#endif  // LOCKSTEP_NN_CHECKPOINT_CHECKPOINT_H_
