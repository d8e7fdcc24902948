#include "nn/module.h"

#include <atomic>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/kernels.h"
#include "core/status.h"

namespace lockstep {

namespace {

std::atomic<uint64_t>& Generation() {
  static std::atomic<uint64_t> generation{1};
  return generation;
}

}  // namespace

uint64_t Module::structure_generation() { return Generation().load(std::memory_order_acquire); }

void Module::BuildHookTable() {
  hook_index_.clear();
  hook_names_.clear();
  hook_generation_ = structure_generation();
  for (NamedParameter& p : NamedParameters()) {
    // A parameter registered twice keeps its first position, as torch's
    // named_parameters() lists a shared parameter once.
    if (hook_index_.emplace(p.parameter, hook_names_.size()).second) {
      hook_names_.push_back(std::move(p.name));
    }
  }
}

void Module::SetGradReadyHook(GradReadyHook hook) {
  hook_ = std::move(hook);
  if (hook_) {
    BuildHookTable();
  } else {
    hook_index_.clear();
    hook_names_.clear();
  }
}

absl::StatusOr<Tensor> Module::Backward(const Tensor& grad_output, bool input_grad) {
  if (!hook_) return BackwardImpl(grad_output, input_grad, ParameterReadyFn());
  if (hook_generation_ != structure_generation()) BuildHookTable();
  const ParameterReadyFn ready = [this](Parameter& parameter) -> absl::Status {
    auto it = hook_index_.find(&parameter);
    if (it == hook_index_.end()) {
      return absl::InternalError(
          absl::StrCat("gradient-ready hook of ", type_name(),
                       ": a layer reported a parameter that is not registered below this module (register "
                       "every parameter with RegisterParameter)"));
    }
    const std::string& name = hook_names_[it->second];
    absl::Status s = hook_(GradReadyEvent{parameter, it->second, name});
    if (s.ok()) return s;
    return absl::Status(s.code(),
                        absl::StrCat("gradient-ready hook for '", name, "' (index ", it->second, "): ", s.message()));
  };
  return BackwardImpl(grad_output, input_grad, ready);
}

absl::StatusOr<Tensor> Module::ChildForward(Module& child, const Tensor& input) {
  const ModuleHooks& hooks = child.module_hooks_;
  if (hooks.pre_forward) LOCKSTEP_RETURN_IF_ERROR(hooks.pre_forward());
  absl::StatusOr<Tensor> out = child.Forward(input);
  if (out.ok() && hooks.post_forward) LOCKSTEP_RETURN_IF_ERROR(hooks.post_forward());
  return out;
}

absl::StatusOr<Tensor> Module::ChildBackward(Module& child, const Tensor& grad_output, bool input_grad,
                                             const ParameterReadyFn& ready) {
  const ModuleHooks& hooks = child.module_hooks_;
  if (hooks.pre_backward) LOCKSTEP_RETURN_IF_ERROR(hooks.pre_backward());
  absl::StatusOr<Tensor> grad_input = child.BackwardImpl(grad_output, input_grad, ready);
  if (grad_input.ok() && hooks.post_backward) LOCKSTEP_RETURN_IF_ERROR(hooks.post_backward());
  return grad_input;
}

absl::Status Module::AccumulateGrad(Parameter& parameter, const Tensor& grad, const ParameterReadyFn& ready) {
  if (!parameter.requires_grad) return absl::OkStatus();  // Frozen: no gradient, no hook.
  const Tensor& value = parameter.value;
  if (!grad.defined() || grad.numel() != value.numel() || grad.device() != value.device()) {
    return absl::InternalError(absl::StrCat("AccumulateGrad: gradient ",
                                            grad.defined() ? grad.DebugString() : "undefined",
                                            " does not fit parameter ", value.DebugString()));
  }
  Tensor converted = grad;
  if (grad.dtype() != value.dtype()) {
    LOCKSTEP_ASSIGN_OR_RETURN(converted, Tensor::Empty(value.shape(), value.dtype(), value.device()));
    LOCKSTEP_RETURN_IF_ERROR(Cast(grad, converted));
  }
  if (!parameter.grad.defined()) {
    // The first gradient is copied, not added to zeros: x + 0 would turn -0 into +0.
    LOCKSTEP_ASSIGN_OR_RETURN(parameter.grad, Tensor::Empty(value.shape(), value.dtype(), value.device()));
    LOCKSTEP_RETURN_IF_ERROR(parameter.grad.CopyFrom(converted));
  } else {
    LOCKSTEP_RETURN_IF_ERROR(ReduceInto(ReduceOp::kSum, converted, parameter.grad));
  }
  return GradReady(parameter, ready);
}

void Module::RegisterParameter(std::string name, Parameter* parameter) {
  parameters_.emplace_back(std::move(name), parameter);
  Generation().fetch_add(1, std::memory_order_acq_rel);
}

void Module::RegisterBuffer(std::string name, Tensor* buffer) { buffers_.emplace_back(std::move(name), buffer); }

Module* Module::RegisterModule(std::string name, std::unique_ptr<Module> child) {
  Module* raw = child.get();
  children_.emplace_back(std::move(name), std::move(child));
  Generation().fetch_add(1, std::memory_order_acq_rel);
  return raw;
}

void Module::CollectParameters(const std::string& prefix, std::vector<NamedParameter>& out) {
  for (auto& [name, p] : parameters_) out.push_back({prefix + name, p});
  for (auto& [name, child] : children_) child->CollectParameters(prefix + name + ".", out);
}

void Module::CollectBuffers(const std::string& prefix, std::vector<NamedTensor>& out) {
  for (auto& [name, b] : buffers_) out.emplace_back(prefix + name, *b);
  for (auto& [name, child] : children_) child->CollectBuffers(prefix + name + ".", out);
}

void Module::CollectState(const std::string& prefix, std::vector<NamedTensor>& out) {
  for (auto& [name, p] : parameters_) out.emplace_back(prefix + name, p->value);
  for (auto& [name, b] : buffers_) out.emplace_back(prefix + name, *b);
  for (auto& [name, child] : children_) child->CollectState(prefix + name + ".", out);
}

void Module::CollectExtraState(const std::string& prefix, std::map<std::string, std::string>& out) const {
  for (const auto& [key, value] : OwnExtraState()) out[prefix + key] = value;
  for (const auto& [name, child] : children_) child->CollectExtraState(prefix + name + ".", out);
}

std::map<std::string, std::string> Module::ExtraState() const {
  std::map<std::string, std::string> out;
  CollectExtraState("", out);
  return out;
}

// Offers each entry under `prefix` whose remaining key has no '.' to this
// module, the rest to the child named by the next component.
absl::Status Module::VisitExtraState(const std::string& prefix, const std::map<std::string, std::string>& state,
                                     bool apply, std::vector<std::string>& problems, std::set<std::string>& seen) {
  for (auto it = state.lower_bound(prefix); it != state.end() && it->first.compare(0, prefix.size(), prefix) == 0;
       ++it) {
    const std::string key = it->first.substr(prefix.size());
    if (key.find('.') != std::string::npos) continue;
    seen.insert(it->first);
    absl::Status s = LoadOwnExtraState(key, it->second, apply);
    if (!s.ok()) problems.push_back(absl::StrCat("'", it->first, "': ", s.message()));
  }
  for (auto& [name, child] : children_) {
    LOCKSTEP_RETURN_IF_ERROR(child->VisitExtraState(prefix + name + ".", state, apply, problems, seen));
  }
  return absl::OkStatus();
}

absl::Status Module::LoadExtraState(const std::map<std::string, std::string>& state) {
  std::vector<std::string> problems;
  std::set<std::string> seen;
  LOCKSTEP_RETURN_IF_ERROR(VisitExtraState("", state, /*apply=*/false, problems, seen));
  for (const auto& [key, value] : state) {
    if (!seen.count(key)) problems.push_back("'" + key + "' names no module of this model");
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoadExtraState into ", type_name(), ": ", absl::StrJoin(problems, "; ")));
  }
  return VisitExtraState("", state, /*apply=*/true, problems, seen);
}

std::vector<NamedParameter> Module::NamedParameters() {
  std::vector<NamedParameter> out;
  CollectParameters("", out);
  return out;
}

std::vector<Parameter*> Module::Parameters() {
  std::vector<Parameter*> out;
  for (NamedParameter& p : NamedParameters()) out.push_back(p.parameter);
  return out;
}

std::vector<NamedTensor> Module::NamedBuffers() {
  std::vector<NamedTensor> out;
  CollectBuffers("", out);
  return out;
}

absl::StatusOr<int64_t> Module::SetRequiresGrad(absl::string_view name_prefix, bool requires_grad) {
  std::vector<NamedParameter> named = NamedParameters();
  const auto selected = [&](const std::string& name) {
    if (name_prefix.empty() || !absl::StartsWith(name, name_prefix)) return false;
    return name.size() == name_prefix.size() || name_prefix.back() == '.' || name[name_prefix.size()] == '.';
  };
  int64_t matched = 0;
  for (const NamedParameter& p : named) matched += selected(p.name) ? 1 : 0;
  if (matched == 0) {
    std::vector<std::string> names;
    for (const NamedParameter& p : named) names.push_back(p.name);
    return absl::NotFoundError(absl::StrCat("SetRequiresGrad: no parameter of this ", type_name(), " is named '",
                                            name_prefix,
                                            "' or below it; its parameters are: ", absl::StrJoin(names, ", ")));
  }
  for (const NamedParameter& p : named) {
    if (selected(p.name)) p.parameter->requires_grad = requires_grad;
  }
  return matched;
}

std::vector<std::pair<std::string, Module*>> Module::NamedModules() {
  std::vector<std::pair<std::string, Module*>> out = {{"", this}};
  for (auto& [name, child] : children_) {
    for (auto& [path, module] : child->NamedModules()) {
      out.emplace_back(path.empty() ? name : name + "." + path, module);
    }
  }
  return out;
}

std::vector<NamedTensor> Module::StateDict() {
  std::vector<NamedTensor> out;
  CollectState("", out);
  return out;
}

absl::Status Module::LoadStateDict(const std::vector<NamedTensor>& state, bool strict) {
  std::map<std::string, const Tensor*> given;
  std::vector<std::string> problems;
  for (const auto& [name, tensor] : state) {
    if (!given.emplace(name, &tensor).second) problems.push_back("duplicate entry '" + name + "'");
  }
  std::vector<std::string> missing;
  std::set<std::string> matched;
  const std::vector<NamedTensor> own = StateDict();
  for (const auto& [name, target] : own) {
    auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
      continue;
    }
    matched.insert(name);
    const Tensor& src = *it->second;
    if (!src.defined() || src.shape() != target.shape() || src.dtype() != target.dtype()) {
      problems.push_back(absl::StrCat(
          "'", name, "': expected ", DTypeName(target.dtype()), ShapeToString(target.shape()), ", got ",
          src.defined() ? std::string(DTypeName(src.dtype())) + ShapeToString(src.shape()) : std::string("undefined")));
    }
  }
  if (strict) {
    if (!missing.empty()) problems.push_back("missing: " + absl::StrJoin(missing, ", "));
    std::vector<std::string> unexpected;
    for (const auto& [name, t] : given) {
      if (!matched.count(name)) unexpected.push_back(name);
    }
    if (!unexpected.empty()) problems.push_back("unexpected: " + absl::StrJoin(unexpected, ", "));
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoadStateDict into ", type_name(), ": ", absl::StrJoin(problems, "; "),
                     ". Check that the checkpoint was written by the same model architecture"));
  }
  for (const auto& [name, target] : own) {
    auto it = given.find(name);
    if (it != given.end()) LOCKSTEP_RETURN_IF_ERROR(target.CopyFrom(*it->second));
  }
  return absl::OkStatus();
}

absl::Status Module::ZeroGrad(bool set_to_none) {
  for (Parameter* p : Parameters()) {
    if (!p->grad.defined()) continue;
    if (set_to_none) {
      p->grad = Tensor();
    } else {
      // A fill, not a multiply by 0: a skipped step leaves Inf/NaN behind.
      LOCKSTEP_RETURN_IF_ERROR(p->grad.SetZero());
    }
  }
  return absl::OkStatus();
}

void Module::Train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->Train(on);
}

absl::StatusOr<std::unique_ptr<Module>> Module::CloneTo(Device device) const {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Module> copy, NewLike(device));
  Module& self = const_cast<Module&>(*this);  // StateDict hands out handles only
  LOCKSTEP_RETURN_IF_ERROR(copy->LoadStateDict(self.StateDict()));
  std::vector<NamedParameter> mine = self.NamedParameters(), theirs = copy->NamedParameters();
  for (size_t i = 0; i < mine.size() && i < theirs.size(); ++i) {
    theirs[i].parameter->requires_grad = mine[i].parameter->requires_grad;
  }
  copy->Train(training_);
  return copy;
}

bool Module::HasParameters() const {
  if (!parameters_.empty()) return true;
  for (const auto& [name, child] : children_) {
    if (child->HasParameters()) return true;
  }
  return false;
}

int64_t Module::NumParameterElements() {
  int64_t n = 0;
  for (Parameter* p : Parameters()) n += p->value.numel();
  return n;
}

}  // namespace lockstep
