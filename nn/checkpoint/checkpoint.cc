#include "nn/checkpoint/checkpoint.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "nn/checkpoint/safetensors.h"
#include "nn/checkpoint/state_dict_prefix.h"

namespace lockstep {
namespace {

constexpr char kOptimizerPrefix[] = "optimizer/";
constexpr char kFormatKey[] = "lockstep.checkpoint";

bool Reserved(const std::string& key) {
  return key == kFormatKey || absl::StartsWith(key, "progress.") || absl::StartsWith(key, "optimizer.") ||
         absl::StartsWith(key, "module.");
}

// `op` ("LoadCheckpoint", "ReadCheckpointInfo") starts the error messages.
template <typename Int>
absl::Status ParseField(const std::map<std::string, std::string>& metadata, const char* key, const char* op,
                        const std::string& path, Int& out) {
  auto it = metadata.find(key);
  if (it == metadata.end()) {
    return absl::InvalidArgumentError(absl::StrCat(op, " ", path, ": metadata has no '", key,
                                                   "'; the file is not a complete lockstep "
                                                   "checkpoint (use LoadModel for weights only)"));
  }
  if (!absl::SimpleAtoi(it->second, &out)) {
    return absl::InvalidArgumentError(absl::StrCat(op, " ", path, ": metadata '", key, "' is \"", it->second,
                                                   "\", expected an integer; the file is corrupt"));
  }
  return absl::OkStatus();
}

// The format marker and the progress fields of a checkpoint's metadata.
absl::StatusOr<LoadedCheckpoint> ParseInfo(const std::map<std::string, std::string>& metadata, const char* op,
                                           const std::string& path) {
  LoadedCheckpoint loaded;
  loaded.metadata = metadata;
  if (metadata.count(kFormatKey) == 0 || metadata.at(kFormatKey) != "1") {
    return absl::InvalidArgumentError(
        absl::StrCat(op, " ", path, ": metadata '", kFormatKey,
                     "' is missing or not \"1\"; this is not a lockstep training checkpoint (for plain "
                     "weights use LoadModel)"));
  }
  LOCKSTEP_RETURN_IF_ERROR(ParseField(metadata, "progress.epoch", op, path, loaded.progress.epoch));
  LOCKSTEP_RETURN_IF_ERROR(ParseField(metadata, "progress.step", op, path, loaded.progress.step));
  LOCKSTEP_RETURN_IF_ERROR(ParseField(metadata, "progress.seed", op, path, loaded.progress.seed));
  return loaded;
}

}  // namespace

absl::Status SaveCheckpoint(const std::string& path, Module& model, const Optimizer* optimizer,
                            const TrainingProgress& progress, const std::map<std::string, std::string>& extra_metadata,
                            const AtomicWriteOptions& options) {
  std::vector<NamedTensor> tensors = model.StateDict();
  std::map<std::string, std::string> metadata = {
      {kFormatKey, "1"},
      {"progress.epoch", absl::StrCat(progress.epoch)},
      {"progress.step", absl::StrCat(progress.step)},
      {"progress.seed", absl::StrCat(progress.seed)},
  };
  for (const auto& [key, value] : model.ExtraState()) metadata["module." + key] = value;
  if (optimizer != nullptr) {
    for (const NamedTensor& t : optimizer->StateTensors()) {
      tensors.emplace_back(kOptimizerPrefix + t.first, t.second);
    }
    metadata["optimizer.type"] = std::string(optimizer->type_name());
    for (const auto& [key, value] : optimizer->Hyperparameters()) metadata["optimizer." + key] = value;
  }
  for (const auto& [key, value] : extra_metadata) {
    if (Reserved(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("SaveCheckpoint ", path, ": metadata key '", key,
                       "' is reserved (lockstep.checkpoint, progress.*, optimizer.*, module.*); prefix your keys, e.g. "
                       "\"scaler.\""));
    }
    metadata[key] = value;
  }
  return WriteSafetensorsFile(path, tensors, metadata, options);
}

absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& path, Module& model, Optimizer* optimizer,
                                                const SafetensorsReadOptions& read) {
  LOCKSTEP_ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensorsFile(path, read));
  LOCKSTEP_ASSIGN_OR_RETURN(LoadedCheckpoint loaded, ParseInfo(file.metadata, "LoadCheckpoint", path));

  std::vector<NamedTensor> model_state, optimizer_state;
  for (auto& [name, tensor] : file.tensors) {
    if (absl::StartsWith(name, kOptimizerPrefix)) {
      optimizer_state.emplace_back(name.substr(sizeof(kOptimizerPrefix) - 1), std::move(tensor));
    } else {
      model_state.emplace_back(std::move(name), std::move(tensor));
    }
  }
  auto type = file.metadata.find("optimizer.type");
  if (optimizer != nullptr && type != file.metadata.end() && type->second != optimizer->type_name()) {
    return absl::InvalidArgumentError(absl::StrCat("LoadCheckpoint ", path, ": written with a ", type->second,
                                                   " optimizer but resuming with ", optimizer->type_name()));
  }
  std::map<std::string, std::string> extra;
  for (const auto& [key, value] : file.metadata) {
    if (absl::StartsWith(key, "module.")) extra[key.substr(7)] = value;
  }
  const std::map<std::string, std::string> previous_extra = model.ExtraState();
  // Extra state first (it validates before applying), then the optimizer: if
  // the model's tensors then refuse, the old states are put back, so a
  // failed load changes nothing.
  {
    absl::Status s = model.LoadExtraState(extra);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("LoadCheckpoint ", path, ": ", s.message()));
  }
  std::vector<NamedTensor> previous;
  if (optimizer != nullptr) {
    previous = optimizer->StateTensors();
    absl::Status s = optimizer->LoadStateTensors(optimizer_state);
    if (!s.ok()) {
      LOCKSTEP_RETURN_IF_ERROR(model.LoadExtraState(previous_extra));
      return absl::Status(s.code(), absl::StrCat("LoadCheckpoint ", path, ": ", s.message()));
    }
  }
  absl::Status s = model.LoadStateDict(model_state, /*strict=*/true);
  if (!s.ok()) {
    LOCKSTEP_RETURN_IF_ERROR(model.LoadExtraState(previous_extra));
    if (optimizer != nullptr) LOCKSTEP_RETURN_IF_ERROR(optimizer->LoadStateTensors(previous));
    return absl::Status(s.code(), absl::StrCat("LoadCheckpoint ", path, ": ", s.message()));
  }
  return loaded;
}

absl::StatusOr<LoadedCheckpoint> ReadCheckpointInfo(const std::string& path, const SafetensorsReadOptions& read) {
  LOCKSTEP_ASSIGN_OR_RETURN(const auto metadata, ReadSafetensorsMetadata(path, read));
  return ParseInfo(metadata, "ReadCheckpointInfo", path);
}

absl::Status SaveModel(const std::string& path, Module& model, const AtomicWriteOptions& options) {
  return WriteSafetensorsFile(path, model.StateDict(), {}, options);
}

absl::Status LoadModel(const std::string& path, Module& model) {
  LOCKSTEP_ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensorsFile(path));
  // A file saved from a PyTorch DDP or DataParallel model has "module."
  // before every name: one rule for wrapped models (nn/checkpoint/state_dict_prefix.h).
  absl::Status s = LoadStateDictAcceptingWrapperPrefix(model, file.tensors, /*strict=*/true);
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat("LoadModel ", path, ": ", s.message()));
  return absl::OkStatus();
}

}  // namespace lockstep
