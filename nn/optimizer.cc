#include "nn/optimizer.h"

#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status.h"

namespace lockstep {

absl::Status Optimizer::ZeroGrad(bool set_to_none) {
  for (const NamedParameter& p : params_) {
    if (!p.parameter->grad.defined()) continue;
    if (set_to_none) {
      p.parameter->grad = Tensor();
    } else {
      LOCKSTEP_RETURN_IF_ERROR(p.parameter->grad.SetZero());
    }
  }
  return absl::OkStatus();
}

std::vector<NamedTensor> Optimizer::StateTensors() const {
  std::vector<NamedTensor> out;
  const std::vector<StateKey> keys = StateKeys();
  for (const auto& [index, entries] : state_) {
    for (const StateKey& k : keys) {
      auto it = entries.find(k.key);
      if (it != entries.end()) out.emplace_back(absl::StrCat("state.", index, ".", k.key), it->second);
    }
  }
  return out;
}

absl::Status Optimizer::LoadStateTensors(const std::vector<NamedTensor>& state) {
  std::vector<std::string> problems;
  std::map<size_t, std::map<std::string, Tensor>> loaded;
  std::map<size_t, std::set<std::string>> seen;  // valid or not
  const std::vector<StateKey> keys = StateKeys();
  for (const auto& [name, tensor] : state) {
    const std::vector<std::string> parts = absl::StrSplit(name, absl::MaxSplits('.', 2));
    size_t index = 0;
    if (parts.size() != 3 || parts[0] != "state" || !absl::SimpleAtoi(parts[1], &index) || index >= params_.size()) {
      problems.push_back(absl::StrCat("'", name, "' is not state.<index < ", params_.size(), ">.<key>"));
      continue;
    }
    const StateKey* key = nullptr;
    for (const StateKey& k : keys) {
      if (k.key == parts[2]) key = &k;
    }
    const Tensor& value = params_[index].parameter->value;
    if (key == nullptr) {
      problems.push_back(absl::StrCat("'", name, "': unknown key for this optimizer"));
      continue;
    }
    const Shape expected = key->scalar ? Shape{} : value.shape();
    seen[index].insert(key->key);
    if (!tensor.defined() || tensor.dtype() != DType::kF32 || tensor.shape() != expected) {
      problems.push_back(absl::StrCat(
          "'", name, "': expected f32", ShapeToString(expected), ", got ",
          tensor.defined() ? absl::StrCat(DTypeName(tensor.dtype()), ShapeToString(tensor.shape())) : "undefined"));
      continue;
    }
    if (!loaded[index].emplace(key->key, tensor).second) {
      problems.push_back(absl::StrCat("'", name, "' appears twice"));
    }
  }
  for (const auto& [index, entries] : seen) {
    for (const StateKey& k : keys) {
      if (!entries.count(k.key)) {
        problems.push_back(absl::StrCat("state.", index, ".", k.key, " is missing"));
      }
    }
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("Optimizer::LoadStateTensors: ", absl::StrJoin(problems, "; "),
                                                   ". Was the checkpoint written with another optimizer or model?"));
  }
  std::map<size_t, std::map<std::string, Tensor>> copies;
  for (const auto& [index, entries] : loaded) {
    const Device device = params_[index].parameter->value.device();
    for (const auto& [key, tensor] : entries) {
      LOCKSTEP_ASSIGN_OR_RETURN(copies[index][key], tensor.To(device));
    }
  }
  state_ = std::move(copies);
  return absl::OkStatus();
}

}  // namespace lockstep
