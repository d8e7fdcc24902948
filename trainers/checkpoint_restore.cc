#include "trainers/checkpoint_restore.h"

#include <algorithm>
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
#include "nn/checkpoint.h"

namespace lockstep {
namespace {

constexpr char kCheckpointPrefix[] = "step-";
constexpr char kCheckpointSuffix[] = ".safetensors";
constexpr int kCheckpointsKept = 2;
// Our keys in a checkpoint's metadata (nn/checkpoint.h reserves others).
constexpr char kBatchKey[] = "trainer.batch";  // Batches done in progress.epoch.
constexpr char kBatchSizeKey[] = "trainer.batch_size";
constexpr char kWorldSizeKey[] = "trainer.world_size";
constexpr char kLossSumKey[] = "trainer.epoch_loss_sum";
constexpr char kCorrectKey[] = "trainer.epoch_correct";
constexpr char kSeenKey[] = "trainer.epoch_seen";
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
    return absl::FailedPreconditionError(absl::StrCat(
        path, " was written with batch size ", batch_size, ", world size ", world_size, " and seed ",
        loaded.progress.seed, "; this run has ", o.batch_size, ", ", o.world_size, " and ", o.seed,
        ". Resume with the same values (the batch position depends on them) or use another "
        "--checkpoint_dir"));
  }
  if (at.batch < 0 || at.batch > batches || at.epoch < 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": batch ", at.batch, " of epoch ", at.epoch,
                                                   " is outside an epoch of ", batches, " batches"));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(at.carried.correct, ParseInt(md, kCorrectKey, path));
  LOCKSTEP_ASSIGN_OR_RETURN(at.carried.count, ParseInt(md, kSeenKey, path));
  auto loss = md.find(kLossSumKey);
  if (loss == md.end() || !absl::SimpleAtod(loss->second, &at.carried.loss_sum)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": metadata '", kLossSumKey, "' is bad"));
  }
  return at;
}

}  // namespace

std::vector<std::string> ListCheckpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!absl::StartsWith(name, kCheckpointPrefix) || !absl::EndsWith(name, kCheckpointSuffix)) {
      continue;
    }
    const std::string digits = name.substr(
        sizeof(kCheckpointPrefix) - 1,
        name.size() - (sizeof(kCheckpointPrefix) - 1) - (sizeof(kCheckpointSuffix) - 1));
    int64_t step;
    if (digits.empty() || !absl::SimpleAtoi(digits, &step)) continue;  // e.g. a temporary file
    found.emplace_back(step, it->path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

namespace train_loop_internal {

absl::Status SaveTrainerCheckpoint(const TrainLoopOptions& o, const Position& at, Module& model,
                                   Optimizer& optimizer, const GradScaler& scaler) {
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
  LOCKSTEP_RETURN_IF_ERROR(
      SaveCheckpoint(CheckpointPath(o.checkpoint_dir, at.step), model, &optimizer, progress, metadata));
  // Older files only after the new one is durable: a crash leaves one.
  const std::vector<std::string> files = ListCheckpoints(o.checkpoint_dir);
  for (size_t i = kCheckpointsKept; i < files.size(); ++i) {
    std::error_code ec;
    std::filesystem::remove(files[i], ec);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Restored>> RestoreTrainerCheckpoint(const TrainLoopOptions& o, Module& model,
                                                                 Optimizer& optimizer, GradScaler& scaler,
                                                                 int64_t batches) {
  const std::vector<std::string> files = ListCheckpoints(o.checkpoint_dir);
  if (files.empty()) return std::optional<Restored>();
  std::vector<std::string> problems;
  for (const std::string& path : files) {
    absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(path, model, &optimizer);
    if (!loaded.ok()) {
      // Writes are atomic, so this is a foreign or damaged file: try the
      // previous one (loading changed nothing).
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
  return absl::DataLossError(absl::StrCat("no checkpoint in ", o.checkpoint_dir,
                                          " could be loaded: ", absl::StrJoin(problems, "; ")));
}

}  // namespace train_loop_internal
}  // namespace lockstep
