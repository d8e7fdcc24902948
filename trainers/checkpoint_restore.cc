#include "trainers/checkpoint_restore.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "nn/checkpoint/checkpoint.h"

namespace lockstep {
namespace {

constexpr char kCheckpointPrefix[] = "step-";
constexpr char kCheckpointSuffix[] = ".safetensors";
constexpr int kCheckpointsKept = 2;
// Our keys in a checkpoint's metadata (nn/checkpoint/checkpoint.h reserves others).
constexpr char kBatchKey[] = "trainer.batch";  // Batches done in progress.epoch.
constexpr char kBatchSizeKey[] = "trainer.batch_size";
constexpr char kWorldSizeKey[] = "trainer.world_size";
constexpr char kLossSumKey[] = "trainer.epoch_loss_sum";
constexpr char kCorrectKey[] = "trainer.epoch_correct";
constexpr char kSeenKey[] = "trainer.epoch_seen";
constexpr char kExamplesKey[] = "trainer.epoch_examples";     // Absent before sequence models: = seen.
constexpr char kGradAccumKey[] = "trainer.grad_accum_steps";  // Absent before accumulation: 1.
constexpr char kScalerPrefix[] = "scaler.";

std::string CheckpointPath(const std::string& dir, int64_t step) {
  return absl::StrFormat("%s/%s%010d%s", dir, kCheckpointPrefix, step, kCheckpointSuffix);
}

absl::StatusOr<int64_t> ParseInt(const std::map<std::string, std::string>& metadata, const std::string& key,
                                 const std::string& path) {
  auto it = metadata.find(key);
  int64_t value;
  if (it == metadata.end() || !absl::SimpleAtoi(it->second, &value)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": metadata '", key,
                                                   "' is missing or not an integer; was it written "
                                                   "by a lockstep trainer?"));
  }
  return value;
}

// The position and the run's settings from a loaded checkpoint's metadata,
// checked against this run.
absl::StatusOr<train_loop_internal::Position> ReadPosition(const LoadedCheckpoint& loaded, const TrainLoopOptions& o,
                                                           int64_t batches, const std::string& path) {
  const auto& md = loaded.metadata;
  train_loop_internal::Position at;
  at.epoch = loaded.progress.epoch;
  at.step = loaded.progress.step;
  LOCKSTEP_ASSIGN_OR_RETURN(at.batch, ParseInt(md, kBatchKey, path));
  LOCKSTEP_ASSIGN_OR_RETURN(const int64_t batch_size, ParseInt(md, kBatchSizeKey, path));
  LOCKSTEP_ASSIGN_OR_RETURN(const int64_t world_size, ParseInt(md, kWorldSizeKey, path));
  if (batch_size != o.batch_size || world_size != o.world_size || loaded.progress.seed != o.seed) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " was written with batch size ", batch_size, ", world size ", world_size, " and seed ",
                     loaded.progress.seed, "; this run has ", o.batch_size, ", ", o.world_size, " and ", o.seed,
                     ". Resume with the same values (the batch position depends on them) or use another "
                     "--checkpoint_dir"));
  }
  if (at.batch < 0 || at.batch > batches || at.epoch < 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": batch ", at.batch, " of epoch ", at.epoch,
                                                   " is outside an epoch of ", batches, " batches"));
  }
  int64_t grad_accum_steps = 1;
  if (md.count(kGradAccumKey) > 0) {
    LOCKSTEP_ASSIGN_OR_RETURN(grad_accum_steps, ParseInt(md, kGradAccumKey, path));
  }
  if (grad_accum_steps != o.grad_accum_steps) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " was written with --grad_accum_steps=", grad_accum_steps, "; this run has ", o.grad_accum_steps,
        ". Its step count and position are in optimizer steps of that many micro-batches: resume with the same "
        "value or use another --checkpoint_dir"));
  }
  if (at.batch % grad_accum_steps != 0 && at.batch != batches) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": batch ", at.batch, " is inside an accumulation group of ",
                                                   grad_accum_steps,
                                                   " micro-batches (checkpoints are written "
                                                   "between groups)"));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(at.carried.correct, ParseInt(md, kCorrectKey, path));
  LOCKSTEP_ASSIGN_OR_RETURN(at.carried.count, ParseInt(md, kSeenKey, path));
  at.carried.examples = at.carried.count;
  if (md.count(kExamplesKey) > 0) {
    LOCKSTEP_ASSIGN_OR_RETURN(at.carried.examples, ParseInt(md, kExamplesKey, path));
  }
  for (const auto& [key, value] : o.checkpoint_metadata) {
    auto it = md.find(key);
    if (it == md.end() || it->second != value) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": its '", key, "' ", it == md.end() ? "is missing" : absl::StrCat("is ", it->second),
                       " but this run's is ", value,
                       ". Resume with the settings it was written with, or use another "
                       "--checkpoint_dir"));
    }
  }
  auto loss = md.find(kLossSumKey);
  if (loss == md.end() || !absl::SimpleAtod(loss->second, &at.carried.loss_sum)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": metadata '", kLossSumKey, "' is bad"));
  }
  return at;
}

// A regular file named like a checkpoint.
struct Found {
  int64_t step;
  std::string path;
};

const char* TypeName(std::filesystem::file_type type) {
  switch (type) {
    case std::filesystem::file_type::directory:
      return "a directory";
    case std::filesystem::file_type::symlink:
      return "a symbolic link";
    case std::filesystem::file_type::fifo:
      return "a FIFO";
    case std::filesystem::file_type::socket:
      return "a socket";
    case std::filesystem::file_type::block:
      return "a block device";
    case std::filesystem::file_type::character:
      return "a character device";
    default:
      return "not a regular file";
  }
}

// Files are found with lstat and read with O_NOFOLLOW (nn/checkpoint/safetensors.h):
// only regular files, never what a symlink points at.
const SafetensorsReadOptions kNoSymlinks = {/*follow_symlinks=*/false};

// The regular files named step-<N>.safetensors in `dir`, newest (highest
// step) first. Anything else so named (a FIFO, a directory, a symlink, a
// socket, a device) is never opened (opening a FIFO waits for a writer),
// counted or removed; with `log`, each is reported on stderr.
std::vector<Found> FindCheckpoints(const std::string& dir, bool log) {
  std::vector<Found> found;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!absl::StartsWith(name, kCheckpointPrefix) || !absl::EndsWith(name, kCheckpointSuffix)) {
      continue;
    }
    const std::string digits = name.substr(
        sizeof(kCheckpointPrefix) - 1, name.size() - (sizeof(kCheckpointPrefix) - 1) - (sizeof(kCheckpointSuffix) - 1));
    int64_t step;
    if (digits.empty() || !absl::SimpleAtoi(digits, &step)) continue;  // e.g. a temporary file
    std::error_code type_ec;
    const std::filesystem::file_type type = it->symlink_status(type_ec).type();  // lstat: links not followed
    if (type != std::filesystem::file_type::regular) {
      if (log) {
        const std::string why = type_ec ? "lstat failed: " + type_ec.message() : TypeName(type);
        std::fprintf(stderr,
                     "checkpoint_dir %s: ignoring %s: %s, not a regular file (never opened, counted or removed)\n",
                     dir.c_str(), name.c_str(), why.c_str());
      }
      continue;
    }
    found.push_back({step, it->path().string()});
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.step > b.step; });
  return found;
}

// Whether `f` looks loadable, from its header alone: a complete file (the
// header checked against its size), a lockstep checkpoint, and the step its
// name claims. Retention counts only such files, so a damaged or foreign
// file with a high step never outranks good checkpoints.
absl::Status CheckLooksLoadable(const Found& f) {
  LOCKSTEP_ASSIGN_OR_RETURN(const LoadedCheckpoint info, ReadCheckpointInfo(f.path, kNoSymlinks));
  if (info.progress.step != f.step) {
    return absl::DataLossError(absl::StrCat(f.path, ": the metadata says step ", info.progress.step,
                                            " but the name says step ", f.step,
                                            " (renamed, or not written by this trainer)"));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> ListCheckpoints(const std::string& dir) {
  std::vector<std::string> out;
  for (Found& f : FindCheckpoints(dir, /*log=*/false)) out.push_back(std::move(f.path));
  return out;
}

namespace train_loop_internal {

absl::Status SaveTrainerCheckpoint(const TrainLoopOptions& o, const Position& at, Module& model, Optimizer& optimizer,
                                   const GradScaler& scaler) {
  TrainingProgress progress;
  progress.epoch = at.epoch;
  progress.step = at.step;
  progress.seed = o.seed;
  std::map<std::string, std::string> metadata = scaler.StateToMetadata(kScalerPrefix);
  metadata[kBatchKey] = absl::StrCat(at.batch);
  metadata[kBatchSizeKey] = absl::StrCat(o.batch_size);
  metadata[kWorldSizeKey] = absl::StrCat(o.world_size);
  metadata[kLossSumKey] = absl::StrFormat("%.17g", at.carried.loss_sum);
  metadata[kCorrectKey] = absl::StrCat(at.carried.correct);
  metadata[kSeenKey] = absl::StrCat(at.carried.count);
  metadata[kExamplesKey] = absl::StrCat(at.carried.examples);
  metadata[kGradAccumKey] = absl::StrCat(o.grad_accum_steps);
  for (const auto& [key, value] : o.checkpoint_metadata) {
    if (metadata.count(key) > 0 || absl::StartsWith(key, "trainer.") || absl::StartsWith(key, kScalerPrefix)) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint_metadata key '", key, "' is one of the training loop's own; choose another name"));
    }
    metadata[key] = value;
  }
  LOCKSTEP_RETURN_IF_ERROR(
      SaveCheckpoint(CheckpointPath(o.checkpoint_dir, at.step), model, &optimizer, progress, metadata));
  // Older files only after the new one is durable: a crash leaves one.
  // Only checkpoints that look loadable count toward the kept ones and are
  // removed beyond them; anything else is left for a person to look at.
  int kept = 0;
  for (const Found& f : FindCheckpoints(o.checkpoint_dir, /*log=*/true)) {
    if (absl::Status s = CheckLooksLoadable(f); !s.ok()) {
      std::fprintf(stderr, "checkpoint retention: %s; not counted among the %d kept, not removed\n",
                   std::string(s.message()).c_str(), kCheckpointsKept);
      continue;
    }
    if (kept < kCheckpointsKept) {
      ++kept;
      continue;
    }
    ::unlink(f.path.c_str());  // Errors ignored: the file stays, and is tried again next time.
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Restored>> RestoreTrainerCheckpoint(const TrainLoopOptions& o, Module& model,
                                                                 Optimizer& optimizer, GradScaler& scaler,
                                                                 int64_t batches) {
  const std::vector<Found> files = FindCheckpoints(o.checkpoint_dir, /*log=*/true);
  if (files.empty()) return std::optional<Restored>();
  std::vector<std::string> problems;
  for (const Found& f : files) {
    const std::string& path = f.path;
    absl::Status looks = CheckLooksLoadable(f);
    absl::StatusOr<LoadedCheckpoint> loaded =
        looks.ok() ? LoadCheckpoint(path, model, &optimizer, kNoSymlinks) : absl::StatusOr<LoadedCheckpoint>(looks);
    if (!loaded.ok()) {
      // Writes are atomic, so this is a foreign or damaged file: try the
      // previous one (loading changed nothing).
      std::fprintf(stderr, "resume: %s; skipped\n", std::string(loaded.status().message()).c_str());
      problems.push_back(absl::StrCat(path, ": ", loaded.status().message()));
      continue;
    }
    // From here on the model is restored: a mismatch is the user's to fix.
    Restored r;
    r.path = path;
    LOCKSTEP_ASSIGN_OR_RETURN(r.at, ReadPosition(*loaded, o, batches, path));
    if (scaler.enabled()) LOCKSTEP_RETURN_IF_ERROR(scaler.LoadStateFromMetadata(loaded->metadata, kScalerPrefix));
    return std::optional<Restored>(std::move(r));
  }
  return absl::DataLossError(
      absl::StrCat("no checkpoint in ", o.checkpoint_dir, " could be loaded: ", absl::StrJoin(problems, "; ")));
}

}  // namespace train_loop_internal
}  // namespace lockstep
