#include "ddp/heal.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/status.h"
#include "nn/checkpoint/safetensors.h"

namespace lockstep {
namespace {

constexpr char kOptimizerPrefix[] = "optimizer/";
constexpr char kStepKey[] = "heal.step";
constexpr char kStatePrefix[] = "state.";

}  // namespace

absl::StatusOr<HealResult> HealFromPeer(Communicator& comm, int64_t step, Module& model, Optimizer* optimizer,
                                        std::map<std::string, std::string>* state) {
  std::vector<std::string> steps;
  LOCKSTEP_RETURN_IF_ERROR(comm.AllGatherBytes(absl::StrCat(step), &steps)->Wait());
  HealResult result;
  result.step = step;
  bool all_there = true;
  std::vector<int64_t> reported(steps.size());
  for (size_t r = 0; r < steps.size(); ++r) {
    if (!absl::SimpleAtoi(steps[r], &reported[r])) {
      return absl::DataLossError(
          absl::StrCat("HealFromPeer on rank ", comm.rank(), ": rank ", r, " reported step '", steps[r], "'"));
    }
    if (result.source < 0 || reported[r] > result.step) {
      result.step = reported[r];
      result.source = static_cast<int>(r);
    }
  }
  for (int64_t s : reported) all_there = all_there && s == result.step;
  if (all_there) {
    result.source = -1;
    return result;
  }
  std::string bytes;
  if (comm.rank() == result.source) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (NamedTensor& t : model.StateDict()) tensors.emplace_back(std::move(t));
    if (optimizer != nullptr) {
      for (NamedTensor& t : optimizer->StateTensors())
        tensors.emplace_back(kOptimizerPrefix + t.first, std::move(t.second));
    }
    std::map<std::string, std::string> metadata;
    if (state != nullptr) {
      for (const auto& [key, value] : *state) metadata[kStatePrefix + key] = value;
    }
    metadata[kStepKey] = absl::StrCat(result.step);
    LOCKSTEP_ASSIGN_OR_RETURN(bytes, SerializeSafetensors(tensors, metadata));
  }
  LOCKSTEP_RETURN_IF_ERROR(comm.BroadcastBytes(&bytes, result.source)->Wait());
  if (comm.rank() == result.source) return result;
  LOCKSTEP_ASSIGN_OR_RETURN(SafetensorsFile file,
                            ParseSafetensors(bytes, absl::StrCat("the state rank ", result.source, " sent")));
  std::vector<NamedTensor> model_state, optimizer_state;
  for (auto& [name, t] : file.tensors) {
    absl::string_view rest = name;
    if (absl::ConsumePrefix(&rest, kOptimizerPrefix)) {
      optimizer_state.emplace_back(std::string(rest), std::move(t));
    } else {
      model_state.emplace_back(name, std::move(t));
    }
  }
  // The optimizer first: it validates before it changes anything, and the
  // model's strict load is then the last step that can fail.
  std::vector<NamedTensor> previous;
  if (optimizer != nullptr) {
    previous = optimizer->StateTensors();
    absl::Status s = optimizer->LoadStateTensors(optimizer_state);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("HealFromPeer on rank ", comm.rank(), ": the optimizer state of rank ",
                                                 result.source, " does not load: ", s.message()));
    }
  }
  absl::Status loaded = model.LoadStateDict(model_state, /*strict=*/true);
  if (!loaded.ok()) {
    if (optimizer != nullptr) optimizer->LoadStateTensors(previous).IgnoreError();
    return absl::Status(loaded.code(), absl::StrCat("HealFromPeer on rank ", comm.rank(), ": the model of rank ",
                                                    result.source, " does not load here: ", loaded.message()));
  }
  if (state != nullptr) {
    state->clear();
    for (const auto& [key, value] : file.metadata) {
      absl::string_view rest = key;
      if (absl::ConsumePrefix(&rest, kStatePrefix)) (*state)[std::string(rest)] = value;
    }
  }
  result.healed = true;
  return result;
}

}  // namespace lockstep
