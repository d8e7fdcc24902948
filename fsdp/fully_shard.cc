#include "fsdp/fully_shard.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "ddp/replica_sync.h"
#include "fsdp/flat_unit.h"

namespace lockstep {

struct FullyShard::Unit {
  std::string path;  // "" for the root unit.
  Module* module = nullptr;
  std::vector<NamedParameter> params;  // Names relative to the root.
  std::unique_ptr<FlatUnit> flat;      // The shard and its collectives.
  std::shared_ptr<Storage> full_storage;
  Tensor full;                // padded elements over full_storage.
  std::vector<Tensor> views;  // Each parameter's view of `full`.
  bool gathered = false;
  // This backward's gradients accumulate straight into the flat gradient
  // (each Parameter::grad a view of it).
  bool grads_in_flat = false;
};

namespace {

bool Within(const std::string& name, const std::string& path) {
  return path.empty() || name.compare(0, path.size() + 1, path + ".") == 0;
}

}  // namespace

FullyShard::FullyShard(Module& module, Communicator& comm, FullyShardOptions options)
    : module_(module), comm_(comm), options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<FullyShard>> FullyShard::Create(Module& module, Communicator& comm,
                                                               FullyShardOptions options) {
  std::vector<NamedParameter> named = module.NamedParameters();
  if (named.empty()) return absl::InvalidArgumentError("FullyShard: the module has no parameters to shard");
  std::vector<Tensor> values;
  std::vector<std::string> names;
  for (const NamedParameter& p : named) {
    const Tensor& v = p.parameter->value;
    if (!v.defined() || v.dtype() != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "FullyShard: parameter '", p.name, "' is ", v.defined() ? v.DebugString() : "undefined",
          "; expected f32 master parameters (compute in lower precision with the layers' compute dtype). Was the "
          "module already wrapped by another FullyShard?"));
    }
    if (!p.parameter->requires_grad) {
      return absl::UnimplementedError(absl::StrCat("FullyShard: parameter '", p.name,
                                                   "' is frozen (requires_grad false); frozen parameters are not "
                                                   "supported yet: unfreeze it or keep the module under DDP"));
    }
    values.push_back(v);
    names.push_back(p.name);
  }
  // The units: named paths, checked, then the root for the rest.
  std::map<std::string, Module*> modules;
  for (auto& [path, m] : module.NamedModules()) modules[path] = m;
  std::vector<std::string> paths = options.units;
  if (paths.empty()) {
    for (auto& [path, m] : module.NamedModules()) {
      if (!path.empty() && path.find('.') == std::string::npos && m->HasParameters()) paths.push_back(path);
    }
  }
  std::vector<std::string> problems;
  for (size_t i = 0; i < paths.size(); ++i) {
    if (paths[i].empty()) {
      problems.push_back("\"\" is the root, which is always a unit");
    } else if (modules.count(paths[i]) == 0) {
      problems.push_back(absl::StrCat("'", paths[i], "' is not a module path"));
    } else if (!modules[paths[i]]->HasParameters()) {
      problems.push_back(absl::StrCat("'", paths[i], "' has no parameters"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (paths[i] == paths[j]) {
        problems.push_back(absl::StrCat("'", paths[i], "' is named twice"));
      } else if (Within(paths[i], paths[j]) || Within(paths[j], paths[i])) {
        problems.push_back(absl::StrCat("'", paths[i], "' and '", paths[j], "' nest"));
      }
    }
  }
  if (!problems.empty()) {
    std::vector<std::string> all;
    for (auto& [path, m] : modules) {
      if (!path.empty()) all.push_back(path);
    }
    return absl::InvalidArgumentError(absl::StrCat("FullyShard: bad units: ", absl::StrJoin(problems, "; "),
                                                   ". The module paths are: ", absl::StrJoin(all, ", ")));
  }

  LOCKSTEP_RETURN_IF_ERROR(VerifyShapesAcrossRanks(comm, values, names));
  std::vector<Tensor> state = values;
  for (const NamedTensor& b : module.NamedBuffers()) state.push_back(b.second);
  LOCKSTEP_RETURN_IF_ERROR(BroadcastFromRankZero(comm, state));

  std::unique_ptr<FullyShard> fsdp(new FullyShard(module, comm, std::move(options)));
  auto root = std::make_unique<Unit>();
  root->module = &module;
  fsdp->units_.push_back(std::move(root));
  for (const std::string& path : paths) {
    auto unit = std::make_unique<Unit>();
    unit->path = path;
    unit->module = modules[path];
    fsdp->units_.push_back(std::move(unit));
  }
  for (const NamedParameter& p : named) {
    size_t owner = 0;
    for (size_t u = 1; u < fsdp->units_.size(); ++u) {
      if (Within(p.name, fsdp->units_[u]->path)) owner = u;
    }
    fsdp->units_[owner]->params.push_back(p);
  }
  for (size_t u = 0; u < fsdp->units_.size(); ++u) {
    Unit& unit = *fsdp->units_[u];
    std::vector<int64_t> numels;
    for (const NamedParameter& p : unit.params) numels.push_back(p.parameter->value.numel());
    const Device device = named[0].parameter->value.device();
    LOCKSTEP_ASSIGN_OR_RETURN(unit.flat, FlatUnit::Create(unit.path, numels, comm, device));
    const FlatShardLayout& layout = unit.flat->layout();
    LOCKSTEP_ASSIGN_OR_RETURN(unit.full_storage,
                              Storage::Allocate(static_cast<size_t>(layout.padded) * sizeof(float), device));
    LOCKSTEP_ASSIGN_OR_RETURN(unit.full, Tensor::FromStorage(unit.full_storage, 0, {layout.padded}, DType::kF32));
    for (size_t i = 0; i < unit.params.size(); ++i) {
      const Tensor& value = unit.params[i].parameter->value;
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor view, ParameterOf(layout, unit.full, i, value.shape()));
      unit.views.push_back(view);
      LOCKSTEP_RETURN_IF_ERROR(unit.flat->SetShardFrom(i, value));
      unit.params[i].parameter->value = Tensor();
      unit.params[i].parameter->grad = Tensor();
    }
    LOCKSTEP_RETURN_IF_ERROR(unit.full_storage->Release());
    if (u == 0) continue;
    FullyShard* self = fsdp.get();
    ModuleHooks hooks;
    hooks.pre_forward = [self, u] { return self->PreForward(u); };
    hooks.post_forward = [self, u] { return self->PostForward(u); };
    hooks.pre_backward = [self, u] { return self->PreBackward(u); };
    hooks.post_backward = [self, u] { return self->PostBackward(u); };
    unit.module->SetModuleHooks(std::move(hooks));
  }
  return fsdp;
}

FullyShard::~FullyShard() {
  // Each FlatUnit waits for its own collectives.
  for (auto& unit : units_) {
    if (!unit->path.empty()) unit->module->SetModuleHooks(ModuleHooks());
  }
}

absl::Status FullyShard::IssueGather(size_t u) {
  Unit& unit = *units_[u];
  if (unit.gathered || unit.flat->gather_pending()) return absl::OkStatus();
  LOCKSTEP_RETURN_IF_ERROR(unit.full_storage->Restore());
  return unit.flat->IssueGather(unit.full);
}

absl::Status FullyShard::Unshard(size_t u) {
  Unit& unit = *units_[u];
  if (unit.gathered) return absl::OkStatus();
  LOCKSTEP_RETURN_IF_ERROR(IssueGather(u));
  LOCKSTEP_RETURN_IF_ERROR(unit.flat->WaitGather());
  for (size_t i = 0; i < unit.params.size(); ++i) unit.params[i].parameter->value = unit.views[i];
  unit.gathered = true;
  return absl::OkStatus();
}

absl::Status FullyShard::Reshard(size_t u) {
  Unit& unit = *units_[u];
  // A prefetch may still write into the buffer: let it land first.
  absl::Status landed = unit.flat->WaitGather();
  for (const NamedParameter& p : unit.params) p.parameter->value = Tensor();
  unit.gathered = false;
  absl::Status released = unit.full_storage->Release();
  return landed.ok() ? released : landed;
}

absl::Status FullyShard::PrepareGrads(size_t u) {
  Unit& unit = *units_[u];
  if (!sync_ || unit.grads_in_flat) return absl::OkStatus();
  for (const NamedParameter& p : unit.params) {
    if (p.parameter->grad.defined()) return absl::OkStatus();  // NoSync's accumulation: reduce it as it is.
  }
  LOCKSTEP_RETURN_IF_ERROR(unit.flat->BeginGrads());
  for (size_t i = 0; i < unit.params.size(); ++i) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor flat, unit.flat->GradView(i));
    LOCKSTEP_ASSIGN_OR_RETURN(unit.params[i].parameter->grad, flat.Reshape(unit.views[i].shape()));
  }
  unit.grads_in_flat = true;
  return absl::OkStatus();
}

absl::Status FullyShard::ReduceGrads(size_t u) {
  Unit& unit = *units_[u];
  if (!std::exchange(unit.grads_in_flat, false)) LOCKSTEP_RETURN_IF_ERROR(unit.flat->BeginGrads());
  for (size_t i = 0; i < unit.params.size(); ++i) {
    Parameter& p = *unit.params[i].parameter;
    if (!p.grad.defined()) continue;  // Unused in this backward: contributes zeros, as in DDP.
    LOCKSTEP_RETURN_IF_ERROR(unit.flat->AddGrad(i, p.grad));
    p.grad = Tensor();
  }
  return unit.flat->IssueReduce();
}

absl::Status FullyShard::FinishGradients(size_t except) {
  absl::Status first;
  for (size_t u = 0; u < units_.size(); ++u) {
    if (u == except) continue;
    absl::Status s = units_[u]->flat->FinishReduce();
    if (first.ok()) first = s;
  }
  return first;
}

size_t FullyShard::Neighbour(size_t u, int step) const {
  if (!order_known_ || position_[u] == kNone) return kNone;
  const size_t next = position_[u] + step;  // Wraps past the front: out of range.
  return next < order_.size() ? order_[next] : kNone;
}

absl::Status FullyShard::PreForward(size_t u) {
  if (summoned_) return absl::OkStatus();  // The plain module runs.
  if (!order_known_ && std::find(order_.begin(), order_.end(), u) == order_.end()) order_.push_back(u);
  const size_t next = options_.prefetch ? Neighbour(u, +1) : kNone;
  if (next != kNone) {
    LOCKSTEP_RETURN_IF_ERROR(IssueGather(u));  // This unit's own gather goes first.
    LOCKSTEP_RETURN_IF_ERROR(IssueGather(next));
  }
  return Unshard(u);
}

absl::Status FullyShard::PostForward(size_t u) {
  if (summoned_) return absl::OkStatus();  // The plain module runs.
  return options_.reshard_after_forward ? Reshard(u) : absl::OkStatus();
}

absl::Status FullyShard::PreBackward(size_t u) {
  if (summoned_) return absl::OkStatus();  // The plain module runs.
  LOCKSTEP_RETURN_IF_ERROR(PrepareGrads(u));
  const size_t previous = options_.prefetch ? Neighbour(u, -1) : kNone;
  if (previous != kNone) {
    LOCKSTEP_RETURN_IF_ERROR(IssueGather(u));
    LOCKSTEP_RETURN_IF_ERROR(IssueGather(previous));
  }
  return Unshard(u);
}

absl::Status FullyShard::PostBackward(size_t u) {
  if (summoned_) return absl::OkStatus();  // The plain module runs.
  if (sync_) {
    LOCKSTEP_RETURN_IF_ERROR(ReduceGrads(u));
    // One reduce-scatter in flight at a time (this unit's, overlapping the
    // next unit's backward): the flat gradients never add up to the model.
    LOCKSTEP_RETURN_IF_ERROR(FinishGradients(u));
  }
  return Reshard(u);
}

absl::Status FullyShard::Settle() {
  absl::Status first = FinishGradients();
  for (auto& unit : units_) {
    if (!std::exchange(unit->grads_in_flat, false)) continue;
    // A backward that failed before reducing: its partial gradients go.
    for (const NamedParameter& p : unit->params) p.parameter->grad = Tensor();
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    absl::Status s = Reshard(u);
    if (first.ok()) first = s;
  }
  return first;
}

absl::Status FullyShard::NotSummoned(const char* op) const {
  if (!summoned_) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("FullyShard::", op, " on rank ", comm_.rank(),
                                                    ": the full parameters are summoned; call "
                                                    "ReleaseFullParameters first"));
}

absl::Status FullyShard::SummonFullParameters() {
  LOCKSTEP_RETURN_IF_ERROR(NotSummoned("SummonFullParameters"));
  LOCKSTEP_RETURN_IF_ERROR(Settle());
  std::vector<std::vector<Tensor>> values(units_.size());
  for (size_t u = 0; u < units_.size(); ++u) {
    Unit& unit = *units_[u];
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor full, unit.flat->GatherCopy());
    for (size_t i = 0; i < unit.params.size(); ++i) {
      // Views of the unit's own gathered copy: one buffer a unit, no second copy.
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor shaped, ParameterOf(unit.flat->layout(), full, i, unit.views[i].shape()));
      values[u].push_back(std::move(shaped));
    }
  }
  // Only once every gather succeeded: nothing changes on an error.
  for (size_t u = 0; u < units_.size(); ++u) {
    for (size_t i = 0; i < units_[u]->params.size(); ++i) units_[u]->params[i].parameter->value = values[u][i];
  }
  summoned_ = true;
  return absl::OkStatus();
}

absl::Status FullyShard::ReleaseFullParameters(bool write_back) {
  if (!summoned_) {
    return absl::FailedPreconditionError(absl::StrCat("FullyShard::ReleaseFullParameters on rank ", comm_.rank(),
                                                      ": nothing is summoned (call SummonFullParameters first)"));
  }
  absl::Status status;
  for (auto& unit : units_) {
    for (size_t i = 0; i < unit->params.size(); ++i) {
      Parameter& p = *unit->params[i].parameter;
      if (write_back && status.ok()) {
        if (!p.value.defined() || p.value.shape() != unit->views[i].shape()) {
          status = absl::InvalidArgumentError(absl::StrCat(
              "FullyShard::ReleaseFullParameters on rank ", comm_.rank(), ": parameter '", unit->params[i].name,
              "' is ", p.value.defined() ? p.value.DebugString() : "undefined", ", expected shape [",
              absl::StrJoin(unit->views[i].shape(), ", "), "]; the shards keep what they had from that parameter on"));
        } else {
          status = unit->flat->SetShardFrom(i, p.value);
        }
      }
      p.value = Tensor();
      p.grad = Tensor();
    }
  }
  summoned_ = false;
  return status;
}

absl::StatusOr<Tensor> FullyShard::Forward(const Tensor& input) {
  LOCKSTEP_RETURN_IF_ERROR(NotSummoned("Forward"));
  LOCKSTEP_RETURN_IF_ERROR(Settle());
  LOCKSTEP_RETURN_IF_ERROR(IssueGather(0));
  if (options_.prefetch && order_known_ && !order_.empty()) LOCKSTEP_RETURN_IF_ERROR(IssueGather(order_.front()));
  LOCKSTEP_RETURN_IF_ERROR(Unshard(0));
  absl::StatusOr<Tensor> out = module_.Forward(input);
  if (!out.ok()) {
    Settle().IgnoreError();
    return out.status();
  }
  if (!order_known_) {
    position_.assign(units_.size(), kNone);
    for (size_t k = 0; k < order_.size(); ++k) position_[order_[k]] = k;
    order_known_ = true;
  }
  return out;
}

absl::Status FullyShard::Backward(const Tensor& grad_output) {
  LOCKSTEP_RETURN_IF_ERROR(NotSummoned("Backward"));
  if (!units_[0]->gathered) {
    return absl::FailedPreconditionError(
        "FullyShard::Backward: no pending Forward (each Backward consumes the last Forward; call Forward first)");
  }
  if (options_.prefetch && !order_.empty()) LOCKSTEP_RETURN_IF_ERROR(IssueGather(order_.back()));
  LOCKSTEP_RETURN_IF_ERROR(PrepareGrads(0));
  absl::Status status = module_.Backward(grad_output, /*input_grad=*/false).status();
  if (status.ok() && sync_) status = ReduceGrads(0);
  absl::Status settled = Settle();
  return status.ok() ? settled : status;
}

std::vector<NamedParameter> FullyShard::ShardParameters() {
  std::vector<NamedParameter> out;
  for (auto& unit : units_) {
    out.push_back({unit->path.empty() ? "flat_param" : unit->path + ".flat_param", &unit->flat->shard()});
  }
  return out;
}

absl::StatusOr<std::vector<NamedTensor>> FullyShard::FullStateDict() {
  LOCKSTEP_RETURN_IF_ERROR(NotSummoned("FullStateDict"));
  LOCKSTEP_RETURN_IF_ERROR(Settle());
  std::map<std::string, Tensor> params;
  for (auto& unit : units_) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor full, unit->flat->GatherCopy());
    const FlatShardLayout& layout = unit->flat->layout();
    for (size_t i = 0; i < unit->params.size(); ++i) {
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor shaped, ParameterOf(layout, full, i, unit->views[i].shape()));
      LOCKSTEP_ASSIGN_OR_RETURN(params[unit->params[i].name], shaped.Clone());
    }
  }
  std::vector<NamedTensor> out;
  for (const NamedTensor& entry : module_.StateDict()) {
    auto it = params.find(entry.first);
    if (it != params.end()) {
      out.emplace_back(entry.first, it->second);
    } else {
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor copy, entry.second.Clone());
      out.emplace_back(entry.first, copy);
    }
  }
  return out;
}

absl::Status FullyShard::LoadFullStateDict(const std::vector<NamedTensor>& state, bool strict) {
  LOCKSTEP_RETURN_IF_ERROR(NotSummoned("LoadFullStateDict"));
  LOCKSTEP_RETURN_IF_ERROR(Settle());
  std::map<std::string, const Tensor*> given;
  for (const NamedTensor& entry : state) given[entry.first] = &entry.second;
  std::vector<std::string> problems;
  std::set<std::string> known;
  auto check = [&](const std::string& name, const Shape& shape) {
    known.insert(name);
    auto it = given.find(name);
    if (it == given.end()) {
      if (strict) problems.push_back(absl::StrCat("missing '", name, "'"));
      return;
    }
    const Tensor& t = *it->second;
    if (!t.defined() || t.dtype() != DType::kF32 || t.shape() != shape) {
      problems.push_back(absl::StrCat("'", name, "' is ", t.defined() ? t.DebugString() : "undefined",
                                      ", expected f32 of shape [", absl::StrJoin(shape, ", "), "]"));
    }
  };
  for (auto& unit : units_) {
    for (size_t i = 0; i < unit->params.size(); ++i) check(unit->params[i].name, unit->views[i].shape());
  }
  std::vector<NamedTensor> buffers = module_.NamedBuffers();
  for (const NamedTensor& b : buffers) {
    known.insert(b.first);
    auto it = given.find(b.first);
    if (it == given.end()) {
      if (strict) problems.push_back(absl::StrCat("missing '", b.first, "'"));
    } else if (!it->second->defined() || it->second->dtype() != b.second.dtype() ||
               it->second->shape() != b.second.shape()) {
      problems.push_back(
          absl::StrCat("'", b.first, "' is ", it->second->DebugString(), ", expected ", b.second.DebugString()));
    }
  }
  if (strict) {
    for (const auto& [name, t] : given) {
      if (known.count(name) == 0) problems.push_back(absl::StrCat("unexpected '", name, "'"));
    }
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("FullyShard::LoadFullStateDict on rank ", comm_.rank(), ": ",
                                                   absl::StrJoin(problems, "; "), "; nothing was loaded"));
  }
  for (auto& unit : units_) {
    for (size_t i = 0; i < unit->params.size(); ++i) {
      auto it = given.find(unit->params[i].name);
      if (it != given.end()) LOCKSTEP_RETURN_IF_ERROR(unit->flat->SetShardFrom(i, *it->second));
    }
  }
  for (const NamedTensor& b : buffers) {
    auto it = given.find(b.first);
    if (it != given.end()) LOCKSTEP_RETURN_IF_ERROR(b.second.CopyFrom(*it->second));
  }
  return absl::OkStatus();
}

FullyShard::NoSyncScope::~NoSyncScope() {
  if (fsdp_ != nullptr) fsdp_->sync_ = true;
}

FullyShard::NoSyncScope FullyShard::NoSync() {
  sync_ = false;
  return NoSyncScope(this);
}

std::vector<std::string> FullyShard::unit_paths() const {
  std::vector<std::string> out;
  for (const auto& unit : units_) out.push_back(unit->path);
  return out;
}

const FlatShardLayout& FullyShard::layout(size_t unit) const { return units_[unit]->flat->layout(); }

std::vector<std::pair<std::string, Shape>> FullyShard::unit_parameters(size_t unit) const {
  std::vector<std::pair<std::string, Shape>> out;
  const Unit& u = *units_[unit];
  for (size_t i = 0; i < u.params.size(); ++i) out.emplace_back(u.params[i].name, u.views[i].shape());
  return out;
}

std::vector<std::string> FullyShard::parameter_names() const {
  std::vector<std::string> out;
  for (const NamedParameter& p : module_.NamedParameters()) out.push_back(p.name);
  return out;
}

int FullyShard::gathered_units() const {
  int n = 0;
  for (const auto& unit : units_) n += unit->gathered || unit->flat->gather_pending() ? 1 : 0;
  return n;
}

}  // namespace lockstep
