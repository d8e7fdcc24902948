#include "interop/torch/fsdp/fully_shard.h"

#include <ATen/core/grad_mode.h>
#include <ATen/native/Resize.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "ddp/replica_sync.h"
#include "interop/torch/bridge/tensor_bridge.h"

namespace lockstep {
namespace interop {
namespace {

bool Within(const std::string& name, const std::string& path) {
  return path.empty() || name.compare(0, path.size() + 1, path + ".") == 0;
}

// Raises `status` inside forward or backward as libtorch's error type.
[[noreturn]] void Raise(const absl::Status& status) { TORCH_CHECK(false, "lockstep FullyShard: ", status.ToString()); }

absl::Status Resize(const at::Tensor& full, size_t nbytes) {
  try {
    at::native::resize_bytes_cpu(full.storage().unsafeGetStorageImpl(), nbytes);
  } catch (const c10::Error& e) {
    return absl::ResourceExhaustedError(absl::StrCat("FullyShard: resizing a unit's gathered buffer to ", nbytes,
                                                     " bytes: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

}  // namespace

struct TorchFsdp::State {
  struct Unit {
    std::string path;  // "" for the root unit.
    ShardedUnitBase* module = nullptr;
    std::vector<at::Tensor> params;
    std::vector<std::string> names;
    std::unique_ptr<FlatUnit> flat;
    at::Tensor full;   // [padded] in param_dtype; its storage is empty while resharded.
    Tensor full_view;  // lockstep's view of it while a gather is in flight.
    at::Tensor shard;  // The optimizer's view of flat->shard().value.
    bool gathered = false;
    int grads_pending = 0;  // AccumulateGrad hooks still to fire in this backward.
    bool reduced = false;   // In this backward.
  };

  std::mutex mu;
  Communicator* comm = nullptr;
  torch::nn::Module* module = nullptr;
  TorchFullyShardOptions options;
  std::vector<Unit> units;  // [0] is the root unit.
  // Named units in the order the first forward ran them, and each unit's
  // place in it (kNone: the root, or a unit that did not run).
  static constexpr size_t kNone = ~size_t{0};
  std::vector<size_t> order;
  std::vector<size_t> position;
  bool order_known = false;
  bool sync = true;
  bool in_backward = false;  // From a forward with gradients to the end of its backward.
  bool finalize_queued = false;
  bool summoned = false;  // SummonFullParameters: the hooks stand aside.
  absl::Status error;     // Of a backward: every later Forward returns it.
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks;

  size_t ElementBytes() const { return options.mixed_precision.param_dtype == DType::kF32 ? 4 : 2; }

  // The unit `step` places after (+1) or before (-1) unit `u` in that order.
  size_t Neighbour(size_t u, int step) const {
    if (!order_known || position[u] == kNone) return kNone;
    const size_t next = position[u] + step;  // Wraps past the front: out of range.
    return next < order.size() ? order[next] : kNone;
  }

  absl::Status IssueGather(size_t u) {
    Unit& unit = units[u];
    if (unit.gathered || unit.flat->gather_pending()) return absl::OkStatus();
    LOCKSTEP_RETURN_IF_ERROR(Resize(unit.full, static_cast<size_t>(unit.flat->layout().padded) * ElementBytes()));
    LOCKSTEP_ASSIGN_OR_RETURN(unit.full_view, FromTorch(unit.full));
    return unit.flat->IssueGather(unit.full_view);
  }

  absl::Status Unshard(size_t u) {
    Unit& unit = units[u];
    if (unit.gathered) return absl::OkStatus();
    LOCKSTEP_RETURN_IF_ERROR(IssueGather(u));
    absl::Status done = unit.flat->WaitGather();
    unit.full_view = Tensor();
    LOCKSTEP_RETURN_IF_ERROR(done);
    unit.gathered = true;
    return absl::OkStatus();
  }

  absl::Status Reshard(size_t u) {
    Unit& unit = units[u];
    absl::Status landed = unit.flat->WaitGather();  // A prefetch may still write into the buffer.
    unit.full_view = Tensor();
    unit.gathered = false;
    absl::Status freed = Resize(unit.full, 0);
    return landed.ok() ? freed : landed;
  }

  // Waits for unit u's reduction and puts the result into its shard's
  // libtorch gradient (set when undefined, added otherwise).
  absl::Status FinishReduce(size_t u) {
    Unit& unit = units[u];
    if (!unit.flat->reduce_pending()) return absl::OkStatus();
    Tensor existing;
    if (unit.shard.grad().defined()) {
      LOCKSTEP_ASSIGN_OR_RETURN(existing, FromTorch(unit.shard.grad()));
    }
    unit.flat->shard().grad = existing;
    LOCKSTEP_RETURN_IF_ERROR(unit.flat->FinishReduce());
    if (!existing.defined()) {
      LOCKSTEP_ASSIGN_OR_RETURN(unit.shard.mutable_grad(), ToTorch(unit.flat->shard().grad));
    }
    unit.flat->shard().grad = Tensor();
    return absl::OkStatus();
  }

  absl::Status FinishAll(size_t except = ~size_t{0}) {
    absl::Status first;
    for (size_t u = 0; u < units.size(); ++u) {
      if (u == except) continue;
      absl::Status s = FinishReduce(u);
      if (first.ok()) first = s;
    }
    return first;
  }

  // After unit u's backward: reduce its gradients (unless NoSync), free it.
  absl::Status PostBackward(size_t u) {
    Unit& unit = units[u];
    unit.reduced = true;
    if (sync) {
      LOCKSTEP_RETURN_IF_ERROR(unit.flat->BeginGrads(options.mixed_precision.reduce_dtype));
      for (size_t i = 0; i < unit.params.size(); ++i) {
        at::Tensor& p = unit.params[i];
        if (!p.grad().defined()) continue;  // Unused: zeros, as in DDP.
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor g, FromTorch(p.grad().contiguous()));
        LOCKSTEP_RETURN_IF_ERROR(unit.flat->AddGrad(i, g));
        p.mutable_grad() = at::Tensor();
      }
      LOCKSTEP_RETURN_IF_ERROR(unit.flat->IssueReduce());
      // One reduction in flight at a time: the flat gradients never add up
      // to the whole model.
      LOCKSTEP_RETURN_IF_ERROR(FinishAll(u));
    }
    return Reshard(u);
  }

  absl::Status Settle() {
    absl::Status first = FinishAll();
    for (size_t u = 0; u < units.size(); ++u) {
      absl::Status s = Reshard(u);
      if (first.ok()) first = s;
    }
    return first;
  }

  // Called inside backward (engine callbacks exist only there).
  void QueueFinalize(const std::weak_ptr<State>& weak) {
    if (finalize_queued) return;
    torch::autograd::Engine::get_default_engine().queue_callback([weak] { Finalize(weak); });
    finalize_queued = true;
  }

  absl::Status NotSummoned(const char* op) const {
    if (!summoned) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat("FullyShard::", op, " on rank ", comm->rank(),
                                                      ": the full parameters are summoned; call "
                                                      "ReleaseFullParameters first"));
  }

  absl::Status Fail(const absl::Status& status) {
    error = status;
    in_backward = false;
    return status;
  }

  static void PreForward(const std::weak_ptr<State>& weak, size_t u) {
    std::shared_ptr<State> s = weak.lock();
    if (s == nullptr) return;
    std::unique_lock<std::mutex> lock(s->mu);
    if (s->summoned) return;  // The plain module runs.
    if (!s->order_known && std::find(s->order.begin(), s->order.end(), u) == s->order.end()) s->order.push_back(u);
    absl::Status status = s->IssueGather(u);
    const size_t next = s->options.prefetch ? s->Neighbour(u, +1) : kNone;
    if (status.ok() && next != kNone) status = s->IssueGather(next);
    if (status.ok()) status = s->Unshard(u);
    if (!status.ok()) {
      lock.unlock();
      Raise(status);
    }
  }

  static void PostForward(const std::weak_ptr<State>& weak, size_t u, const at::Tensor& out) {
    std::shared_ptr<State> s = weak.lock();
    if (s == nullptr) return;
    std::unique_lock<std::mutex> lock(s->mu);
    if (s->summoned) return;
    if (at::GradMode::is_enabled() && out.requires_grad()) {
      out.register_hook([weak, u](const at::Tensor&) { PreBackward(weak, u); });
    }
    absl::Status status = s->options.reshard_after_forward ? s->Reshard(u) : absl::OkStatus();
    if (!status.ok()) {
      lock.unlock();
      Raise(status);
    }
  }

  static void PreBackward(const std::weak_ptr<State>& weak, size_t u) {
    std::shared_ptr<State> s = weak.lock();
    if (s == nullptr) return;
    std::unique_lock<std::mutex> lock(s->mu);
    if (!s->in_backward || s->summoned) return;
    s->QueueFinalize(weak);
    absl::Status status = s->IssueGather(u);
    const size_t previous = s->options.prefetch ? s->Neighbour(u, -1) : kNone;
    if (status.ok() && previous != kNone) status = s->IssueGather(previous);
    if (status.ok()) status = s->Unshard(u);
    if (!status.ok()) {
      s->Fail(status).IgnoreError();
      lock.unlock();
      Raise(status);
    }
  }

  static void OnGradReady(const std::weak_ptr<State>& weak, size_t u) {
    std::shared_ptr<State> s = weak.lock();
    if (s == nullptr) return;
    std::unique_lock<std::mutex> lock(s->mu);
    if (!s->in_backward || s->summoned) return;
    s->QueueFinalize(weak);
    Unit& unit = s->units[u];
    if (--unit.grads_pending > 0 || u == 0 || unit.reduced) return;
    absl::Status status = s->PostBackward(u);
    if (!status.ok()) {
      s->Fail(status).IgnoreError();
      lock.unlock();
      Raise(status);
    }
  }

  static void Finalize(const std::weak_ptr<State>& weak) {
    std::shared_ptr<State> s = weak.lock();
    if (s == nullptr) return;
    std::unique_lock<std::mutex> lock(s->mu);
    s->finalize_queued = false;
    if (!s->in_backward) return;
    s->in_backward = false;
    // The root unit, and units some of whose parameters got no gradient,
    // in unit order (the same on every rank).
    absl::Status status;
    for (size_t u = 0; u < s->units.size() && status.ok(); ++u) {
      if (!s->units[u].reduced) status = s->PostBackward(u);
    }
    absl::Status settled = s->Settle();
    if (status.ok()) status = settled;
    if (!status.ok()) {
      s->Fail(status).IgnoreError();
      lock.unlock();
      Raise(status);
    }
  }
};

TorchFsdp::~TorchFsdp() {
  if (state_ == nullptr) return;
  std::lock_guard<std::mutex> lock(state_->mu);
  for (auto& [node, key] : state_->hooks) node->del_post_hook(key);
  for (State::Unit& unit : state_->units) {
    if (unit.module != nullptr) unit.module->SetCallbacks(nullptr, nullptr);
  }
}

absl::StatusOr<std::unique_ptr<TorchFsdp>> TorchFsdp::Create(torch::nn::Module& module, Communicator& comm,
                                                             TorchFullyShardOptions options) {
  const MixedPrecisionPolicy& mp = options.mixed_precision;
  for (DType d : {mp.param_dtype, mp.reduce_dtype}) {
    if (d != DType::kF32 && d != DType::kBF16 && d != DType::kF16) {
      return absl::InvalidArgumentError(
          absl::StrCat("FullyShard: mixed precision dtype ", DTypeName(d), " is not f32, bf16 or f16"));
    }
  }
  std::unique_ptr<TorchFsdp> fsdp(new TorchFsdp());
  fsdp->state_ = std::make_shared<State>();
  State& s = *fsdp->state_;
  s.comm = &comm;
  s.module = &module;
  s.options = options;
  try {
    std::vector<at::Tensor> params;
    std::vector<std::string> names;
    std::vector<Tensor> values, state;
    std::unordered_set<const void*> seen;
    for (const auto& item : module.named_parameters(/*recurse=*/true)) {
      const at::Tensor& p = item.value();
      if (!p.defined() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
      if (p.scalar_type() != at::kFloat || !p.device().is_cpu()) {
        return absl::InvalidArgumentError(absl::StrCat("FullyShard: parameter '", item.key(), "' is ", p.toString(),
                                                       " on ", p.device().str(),
                                                       "; expected f32 CPU parameters (set mixed_precision for "
                                                       "lower-precision compute)"));
      }
      if (!p.requires_grad()) {
        return absl::UnimplementedError(absl::StrCat("FullyShard: parameter '", item.key(),
                                                     "' is frozen (requires_grad false); frozen parameters are not "
                                                     "supported yet: unfreeze it or keep the model under DDP"));
      }
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor view, FromTorch(p));
      params.push_back(p);
      names.push_back(item.key());
      values.push_back(view);
    }
    if (params.empty()) return absl::InvalidArgumentError("FullyShard: the module has no parameters to shard");
    LOCKSTEP_RETURN_IF_ERROR(VerifyShapesAcrossRanks(comm, values, names));
    state = values;
    for (const auto& item : module.named_buffers(/*recurse=*/true)) {
      if (!item.value().defined() || !seen.insert(item.value().unsafeGetTensorImpl()).second) continue;
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor view, FromTorch(item.value()));
      state.push_back(view);
    }
    LOCKSTEP_RETURN_IF_ERROR(BroadcastFromRankZero(comm, state));

    // The units: the Sharded modules, then the root.
    s.units.emplace_back();
    for (const auto& item : module.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
      auto* unit = dynamic_cast<ShardedUnitBase*>(item.value().get());
      if (unit == nullptr) continue;
      for (size_t u = 1; u < s.units.size(); ++u) {
        if (Within(item.key(), s.units[u].path)) {
          return absl::InvalidArgumentError(absl::StrCat("FullyShard: Sharded units nest: '", item.key(),
                                                         "' lies inside '", s.units[u].path,
                                                         "'; mark the outer or the inner modules, not both"));
        }
      }
      State::Unit entry;
      entry.path = item.key();
      entry.module = unit;
      s.units.push_back(std::move(entry));
    }
    for (size_t i = 0; i < params.size(); ++i) {
      size_t owner = 0;
      for (size_t u = 1; u < s.units.size(); ++u) {
        if (Within(names[i], s.units[u].path)) owner = u;
      }
      s.units[owner].params.push_back(params[i]);
      s.units[owner].names.push_back(names[i]);
    }
    const c10::ScalarType gather_type = DTypeToTorch(mp.param_dtype);
    torch::NoGradGuard no_grad;
    for (size_t u = 0; u < s.units.size(); ++u) {
      State::Unit& unit = s.units[u];
      std::vector<int64_t> numels;
      for (const at::Tensor& p : unit.params) numels.push_back(p.numel());
      LOCKSTEP_ASSIGN_OR_RETURN(unit.flat, FlatUnit::Create(unit.path, numels, comm));
      const FlatShardLayout& layout = unit.flat->layout();
      unit.full = at::empty({layout.padded}, at::TensorOptions().dtype(gather_type));
      for (size_t i = 0; i < unit.params.size(); ++i) {
        at::Tensor& p = unit.params[i];
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor value, FromTorch(p.contiguous()));
        LOCKSTEP_RETURN_IF_ERROR(unit.flat->SetShardFrom(i, value));
        // From now on the parameter lives in the unit's flat buffer.
        p.set_data(unit.full.narrow(0, layout.offsets[i], layout.numels[i]).view(p.sizes()));
      }
      LOCKSTEP_RETURN_IF_ERROR(Resize(unit.full, 0));
      LOCKSTEP_ASSIGN_OR_RETURN(unit.shard, ToTorch(unit.flat->shard().value));
      unit.shard.set_requires_grad(true);
    }
    // Hooks: each parameter's AccumulateGrad post-hook; each unit's forward.
    std::weak_ptr<State> weak = fsdp->state_;
    for (size_t u = 0; u < s.units.size(); ++u) {
      for (const at::Tensor& p : s.units[u].params) {
        std::shared_ptr<torch::autograd::Node> node = torch::autograd::impl::grad_accumulator(p);
        if (node == nullptr) {
          return absl::InvalidArgumentError("FullyShard: a parameter is not a leaf of the autograd graph");
        }
        const uintptr_t key = node->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
            [weak, u](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
              State::OnGradReady(weak, u);
              return outputs;
            }));
        s.hooks.emplace_back(std::move(node), key);
      }
      if (u == 0) continue;
      s.units[u].module->SetCallbacks([weak, u] { State::PreForward(weak, u); },
                                      [weak, u](const at::Tensor& out) { State::PostForward(weak, u, out); });
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("FullyShard::Create: libtorch raised: ", e.what()));
  }
  return fsdp;
}

absl::Status TorchFsdp::BeforeForward() {
  std::lock_guard<std::mutex> lock(state_->mu);
  State& s = *state_;
  LOCKSTEP_RETURN_IF_ERROR(s.error);
  LOCKSTEP_RETURN_IF_ERROR(s.NotSummoned("Forward"));
  // A forward without its backward (evaluation) leaves nothing behind.
  s.in_backward = false;
  LOCKSTEP_RETURN_IF_ERROR(s.Settle());
  for (State::Unit& unit : s.units) {
    unit.grads_pending = static_cast<int>(unit.params.size());
    unit.reduced = false;
  }
  s.in_backward = at::GradMode::is_enabled();
  LOCKSTEP_RETURN_IF_ERROR(s.IssueGather(0));
  if (s.options.prefetch && s.order_known && !s.order.empty()) LOCKSTEP_RETURN_IF_ERROR(s.IssueGather(s.order[0]));
  return s.Unshard(0);
}

void TorchFsdp::AfterForward() {
  std::lock_guard<std::mutex> lock(state_->mu);
  State& s = *state_;
  if (!s.order_known) {
    s.position.assign(s.units.size(), State::kNone);
    for (size_t k = 0; k < s.order.size(); ++k) s.position[s.order[k]] = k;
    s.order_known = true;
  }
  if (!s.in_backward) s.Settle().IgnoreError();  // No backward will come to free the root.
}

absl::Status TorchFsdp::ForwardFailed(const std::exception& e) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->in_backward = false;
  state_->Settle().IgnoreError();
  return absl::InternalError(absl::StrCat("FullyShard: the module's forward raised: ", e.what()));
}

absl::Status TorchFsdp::ForwardFailed(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->in_backward = false;
  state_->Settle().IgnoreError();
  return status;
}

absl::Status TorchFsdp::SummonFullParameters() {
  std::lock_guard<std::mutex> lock(state_->mu);
  State& s = *state_;
  LOCKSTEP_RETURN_IF_ERROR(s.NotSummoned("SummonFullParameters"));
  s.in_backward = false;
  LOCKSTEP_RETURN_IF_ERROR(s.Settle());
  std::vector<std::vector<at::Tensor>> values(s.units.size());
  for (size_t u = 0; u < s.units.size(); ++u) {
    State::Unit& unit = s.units[u];
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor full, unit.flat->GatherCopy());
    LOCKSTEP_ASSIGN_OR_RETURN(at::Tensor t, ToTorch(full));
    const FlatShardLayout& layout = unit.flat->layout();
    for (size_t i = 0; i < unit.params.size(); ++i) {
      // Views of the unit's own gathered copy (t keeps it alive): no second copy.
      values[u].push_back(t.narrow(0, layout.offsets[i], layout.numels[i]).view(unit.params[i].sizes()));
    }
  }
  // Only once every gather succeeded: nothing changes on an error.
  torch::NoGradGuard no_grad;
  try {
    for (size_t u = 0; u < s.units.size(); ++u) {
      for (size_t i = 0; i < s.units[u].params.size(); ++i) s.units[u].params[i].set_data(values[u][i]);
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("FullyShard::SummonFullParameters: libtorch raised: ", e.what()));
  }
  s.summoned = true;
  return absl::OkStatus();
}

absl::Status TorchFsdp::ReleaseFullParameters(bool write_back) {
  std::lock_guard<std::mutex> lock(state_->mu);
  State& s = *state_;
  if (!s.summoned) {
    return absl::FailedPreconditionError(absl::StrCat("FullyShard::ReleaseFullParameters on rank ", s.comm->rank(),
                                                      ": nothing is summoned (call SummonFullParameters first)"));
  }
  absl::Status status;
  torch::NoGradGuard no_grad;
  try {
    for (State::Unit& unit : s.units) {
      const FlatShardLayout& layout = unit.flat->layout();
      for (size_t i = 0; i < unit.params.size(); ++i) {
        at::Tensor& p = unit.params[i];
        if (write_back && status.ok()) {
          absl::StatusOr<Tensor> value = FromTorch(p.detach().to(at::kFloat).contiguous());
          status = value.ok() ? unit.flat->SetShardFrom(i, *value) : value.status();
        }
      }
      // Back to their places in the flat buffer, which libtorch checks
      // against the storage's size: made with the memory there, then freed.
      LOCKSTEP_RETURN_IF_ERROR(Resize(unit.full, static_cast<size_t>(layout.padded) * s.ElementBytes()));
      for (size_t i = 0; i < unit.params.size(); ++i) {
        at::Tensor& p = unit.params[i];
        p.set_data(unit.full.narrow(0, layout.offsets[i], layout.numels[i]).view(p.sizes()));
        p.mutable_grad() = at::Tensor();
      }
      LOCKSTEP_RETURN_IF_ERROR(Resize(unit.full, 0));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("FullyShard::ReleaseFullParameters: libtorch raised: ", e.what()));
  }
  s.summoned = false;
  return status;
}

std::vector<at::Tensor> TorchFsdp::shard_parameters() const {
  std::vector<at::Tensor> out;
  for (const State::Unit& unit : state_->units) out.push_back(unit.shard);
  return out;
}

absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> TorchFsdp::FullStateDict() {
  std::lock_guard<std::mutex> lock(state_->mu);
  State& s = *state_;
  LOCKSTEP_RETURN_IF_ERROR(s.NotSummoned("FullStateDict"));
  LOCKSTEP_RETURN_IF_ERROR(s.Settle());
  std::map<std::string, at::Tensor> params;
  for (State::Unit& unit : s.units) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor full, unit.flat->GatherCopy());
    LOCKSTEP_ASSIGN_OR_RETURN(at::Tensor t, ToTorch(full));
    const FlatShardLayout& layout = unit.flat->layout();
    for (size_t i = 0; i < unit.params.size(); ++i) {
      params[unit.names[i]] = t.narrow(0, layout.offsets[i], layout.numels[i]).view(unit.params[i].sizes()).clone();
    }
  }
  std::vector<std::pair<std::string, at::Tensor>> out;
  try {
    for (const auto& item : s.module->named_parameters(/*recurse=*/true)) {
      auto it = params.find(item.key());
      if (it != params.end()) out.emplace_back(item.key(), it->second);
    }
    for (const auto& item : s.module->named_buffers(/*recurse=*/true)) {
      if (item.value().defined()) out.emplace_back(item.key(), item.value().clone());
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("FullyShard::FullStateDict: libtorch raised: ", e.what()));
  }
  return out;
}

absl::Status TorchFsdp::LoadFullStateDict(const std::vector<std::pair<std::string, at::Tensor>>& state, bool strict) {
  std::lock_guard<std::mutex> lock(state_->mu);
  State& s = *state_;
  LOCKSTEP_RETURN_IF_ERROR(s.NotSummoned("LoadFullStateDict"));
  LOCKSTEP_RETURN_IF_ERROR(s.Settle());
  std::map<std::string, const at::Tensor*> given;
  for (const auto& [name, t] : state) given[name] = &t;
  std::vector<std::string> problems;
  std::set<std::string> known;
  auto check = [&](const std::string& name, at::IntArrayRef sizes, c10::ScalarType type) {
    known.insert(name);
    auto it = given.find(name);
    if (it == given.end()) {
      if (strict) problems.push_back(absl::StrCat("missing '", name, "'"));
    } else if (!it->second->defined() || it->second->sizes() != sizes || it->second->scalar_type() != type) {
      problems.push_back(absl::StrCat("'", name, "' is ", it->second->defined() ? it->second->toString() : "undefined",
                                      " of shape [", absl::StrJoin(it->second->sizes(), ", "), "], expected ",
                                      c10::toString(type), " of shape [", absl::StrJoin(sizes, ", "), "]"));
    }
  };
  for (State::Unit& unit : s.units) {
    for (size_t i = 0; i < unit.params.size(); ++i) check(unit.names[i], unit.params[i].sizes(), at::kFloat);
  }
  std::vector<std::pair<std::string, at::Tensor>> buffers;
  for (const auto& item : s.module->named_buffers(/*recurse=*/true)) {
    if (!item.value().defined()) continue;
    check(item.key(), item.value().sizes(), item.value().scalar_type());
    buffers.emplace_back(item.key(), item.value());
  }
  if (strict) {
    for (const auto& [name, t] : given) {
      if (known.count(name) == 0) problems.push_back(absl::StrCat("unexpected '", name, "'"));
    }
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("FullyShard::LoadFullStateDict on rank ", s.comm->rank(), ": ",
                                                   absl::StrJoin(problems, "; "), "; nothing was loaded"));
  }
  torch::NoGradGuard no_grad;
  for (State::Unit& unit : s.units) {
    for (size_t i = 0; i < unit.params.size(); ++i) {
      auto it = given.find(unit.names[i]);
      if (it == given.end()) continue;
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor value, FromTorch(it->second->contiguous()));
      LOCKSTEP_RETURN_IF_ERROR(unit.flat->SetShardFrom(i, value));
    }
  }
  for (auto& [name, b] : buffers) {
    auto it = given.find(name);
    if (it != given.end()) b.copy_(*it->second);
  }
  return absl::OkStatus();
}

void TorchFsdp::set_sync(bool sync) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->sync = sync;
}

std::vector<std::string> TorchFsdp::unit_paths() const {
  std::vector<std::string> out;
  for (const State::Unit& unit : state_->units) out.push_back(unit.path);
  return out;
}

const FlatShardLayout& TorchFsdp::layout(size_t unit) const { return state_->units[unit].flat->layout(); }

std::vector<std::pair<std::string, Shape>> TorchFsdp::unit_parameters(size_t unit) const {
  std::vector<std::pair<std::string, Shape>> out;
  const State::Unit& u = state_->units[unit];
  for (size_t i = 0; i < u.params.size(); ++i) {
    out.emplace_back(u.names[i], Shape(u.params[i].sizes().begin(), u.params[i].sizes().end()));
  }
  return out;
}

std::vector<std::string> TorchFsdp::parameter_names() const {
  // named_parameters order, each tensor once (as Create saw them).
  std::vector<std::string> out;
  std::unordered_set<const void*> seen;
  for (const auto& item : state_->module->named_parameters(/*recurse=*/true)) {
    if (item.value().defined() && seen.insert(item.value().unsafeGetTensorImpl()).second) out.push_back(item.key());
  }
  return out;
}

Communicator& TorchFsdp::comm() const { return *state_->comm; }

int TorchFsdp::gathered_units() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  int n = 0;
  for (const State::Unit& unit : state_->units) n += unit.gathered || unit.flat->gather_pending() ? 1 : 0;
  return n;
}

}  // namespace interop
}  // namespace lockstep
