#include "interop/torch/ddp/distributed_data_parallel.h"

#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <mutex>
#include <unordered_set>

#include "ddp/grad_slots.h"
#include "ddp/reducer.h"
#include "ddp/replica_sync.h"
#include "interop/torch/bridge/tensor_bridge.h"

namespace lockstep {
namespace interop {
namespace {

// A libtorch module's parameters as the reducer sees them: the values
// bridged once (zero-copy views), the gradients bridged when asked (their
// tensor changes: AccumulateGrad creates it, zero_grad may drop it).
class TorchSlots : public GradSlots {
 public:
  TorchSlots(std::vector<at::Tensor> params, std::vector<Tensor> values)
      : params_(std::move(params)), values_(std::move(values)) {}

  size_t size() const override { return params_.size(); }
  const Tensor& value(size_t i) const override { return values_[i]; }
  absl::StatusOr<Tensor> grad(size_t i) override {
    const at::Tensor& g = params_[i].grad();
    if (!g.defined()) return Tensor();
    return FromTorch(g);
  }
  absl::Status set_grad(size_t i, const Tensor& g) override {
    LOCKSTEP_ASSIGN_OR_RETURN(at::Tensor t, ToTorch(g));
    params_[i].mutable_grad() = std::move(t);
    return absl::OkStatus();
  }
  // As PyTorch's reducer's bucket.narrow(0, offset, numel).view(sizes): the
  // gradients of a bucket share one libtorch storage (is_alias_of holds
  // between them, storage_offset is the bucket offset). Made with set_, not
  // narrow(): libtorch's C++ Optimizer::zero_grad calls detach_() on every
  // gradient, which an autograd view refuses ("Can't detach views
  // in-place"); Python's zero_grad steers around that, the C++ one cannot.
  absl::Status set_grad_view(size_t i, const Tensor& bucket, int64_t offset, const Tensor& view) override {
    at::Tensor* base = nullptr;
    for (auto& [ours, theirs] : buckets_) {
      if (ours.raw_data() == bucket.raw_data() && ours.nbytes() == bucket.nbytes()) base = &theirs;
    }
    if (base == nullptr) {
      // A bucket not seen before (the first, or one rebuilt after the first
      // iteration): forget those that nothing but this cache holds.
      buckets_.erase(std::remove_if(buckets_.begin(), buckets_.end(),
                                    [](const auto& b) { return b.second.storage().use_count() == 1; }),
                     buckets_.end());
      LOCKSTEP_ASSIGN_OR_RETURN(at::Tensor t, ToTorch(bucket));
      buckets_.emplace_back(bucket, std::move(t));
      base = &buckets_.back().second;
    }
    try {
      params_[i].mutable_grad() = at::empty({0}, base->options()).set_(base->storage(), offset, params_[i].sizes());
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat("DistributedDataParallel: parameter ", i,
                                              "'s gradient as a view of its bucket: ", e.what_without_backtrace()));
    }
    return absl::OkStatus();
  }

 private:
  std::vector<at::Tensor> params_;
  std::vector<Tensor> values_;
  // Each bucket seen, as lockstep's flat tensor and as one libtorch tensor.
  std::vector<std::pair<Tensor, at::Tensor>> buckets_;
};

// Raises `status` inside backward as libtorch's own error type, so that
// loss.backward() throws it.
[[noreturn]] void RaiseInBackward(const absl::Status& status) {
  TORCH_CHECK(false, "lockstep DistributedDataParallel: ", status.ToString());
}

}  // namespace

// What the autograd hooks share with the DDP object (they may outlive it
// in a graph that is still referenced: they hold it weakly).
struct TorchDdp::State {
  std::mutex mu;
  std::unique_ptr<Reducer> reducer;
  torch::nn::Module* module = nullptr;
  bool has_buffers = false;
  // Between a forward that prepared a backward and that backward's end.
  bool expect_hooks = false;
  bool finalize_queued = false;
  // A reduction that failed inside backward: every later Forward returns it.
  absl::Status error;
  bool fault_tolerant = false;  // DdpOptions::fault_tolerant.

  // A failed reduction: with fault_tolerant no gradient keeps a partial sum.
  void Fail(const absl::Status& status) {
    error = status;
    if (!fault_tolerant || module == nullptr) return;
    torch::NoGradGuard no_grad;
    for (torch::Tensor& p : module->parameters(/*recurse=*/true)) {
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
  }
  // The parameters' AccumulateGrad nodes (the variables hold them weakly)
  // and our hooks' keys on them.
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks;

  // The hook of parameter `index`, after its gradient was accumulated.
  static void OnGradReady(const std::weak_ptr<State>& weak, size_t index) {
    std::shared_ptr<State> s = weak.lock();
    if (s == nullptr) return;
    std::unique_lock<std::mutex> lock(s->mu);
    if (!s->expect_hooks) return;  // NoSync, or a backward without our forward.
    if (!s->finalize_queued) {
      // Runs once backward has finished, before backward() returns.
      torch::autograd::Engine::get_default_engine().queue_callback([weak] { Finalize(weak); });
      s->finalize_queued = true;
    }
    const absl::Status status = s->reducer->MarkReady(index);
    if (!status.ok()) {
      s->Fail(status);
      s->expect_hooks = false;
      lock.unlock();
      RaiseInBackward(status);
    }
  }

  static void Finalize(const std::weak_ptr<State>& weak) {
    std::shared_ptr<State> s = weak.lock();
    if (s == nullptr) return;
    std::unique_lock<std::mutex> lock(s->mu);
    s->finalize_queued = false;
    if (!s->expect_hooks) return;
    s->expect_hooks = false;
    const absl::Status status = s->reducer->FinalizeBackward();
    if (!status.ok()) {
      s->Fail(status);
      lock.unlock();
      RaiseInBackward(status);
    }
  }
};

TorchDdp::TorchDdp(Communicator& comm, DdpOptions options)
    : comm_(comm), options_(options), state_(std::make_shared<State>()) {}

TorchDdp::~TorchDdp() {
  std::lock_guard<std::mutex> lock(state_->mu);
  for (auto& [node, key] : state_->hooks) node->del_post_hook(key);
}

absl::StatusOr<std::unique_ptr<TorchDdp>> TorchDdp::Create(torch::nn::Module& module, Communicator& comm,
                                                           DdpOptions options) {
  LOCKSTEP_ASSIGN_OR_RETURN(const ReducerOptions reducer_options, ToReducerOptions(options));
  std::unique_ptr<TorchDdp> ddp(new TorchDdp(comm, options));
  try {
    // The averaged parameters: those that require a gradient, each once
    // (distributed.py's _build_params_for_reducer); every parameter and
    // buffer is broadcast (_sync_module_states).
    std::vector<at::Tensor> params;
    std::vector<Tensor> values, state;
    std::unordered_set<const void*> seen;
    for (const auto& item : module.named_parameters(/*recurse=*/true)) {
      const at::Tensor& p = item.value();
      // An undefined slot (a layer built without bias) is no parameter.
      if (!p.defined() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor view, FromTorch(p));
      state.push_back(view);
      if (!p.requires_grad()) continue;
      params.push_back(p);
      values.push_back(view);
      ddp->names_.push_back(item.key());
    }
    LOCKSTEP_RETURN_IF_ERROR(VerifyShapesAcrossRanks(comm, values, ddp->names_));
    const auto buffers = module.named_buffers(/*recurse=*/true);
    for (const auto& item : buffers) {
      if (!item.value().defined() || !seen.insert(item.value().unsafeGetTensorImpl()).second) continue;
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor view, FromTorch(item.value()));
      state.push_back(view);
    }
    LOCKSTEP_RETURN_IF_ERROR(BroadcastFromRankZero(comm, state));

    State& s = *ddp->state_;
    s.module = &module;
    s.fault_tolerant = options.fault_tolerant;
    s.has_buffers = buffers.size() > 0;
    LOCKSTEP_ASSIGN_OR_RETURN(s.reducer, Reducer::Create(std::make_unique<TorchSlots>(params, std::move(values)),
                                                         ddp->names_, comm, reducer_options));
    // Gradient-ready hooks as reducer.cpp attaches them: a post-hook on each
    // parameter's AccumulateGrad node, which runs once the gradient is in
    // param.grad().
    std::weak_ptr<State> weak = ddp->state_;
    for (size_t i = 0; i < params.size(); ++i) {
      std::shared_ptr<torch::autograd::Node> node = torch::autograd::impl::grad_accumulator(params[i]);
      if (node == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("DistributedDataParallel: parameter ", ddp->names_[i],
                                                       " is not a leaf of the autograd graph; DDP averages the "
                                                       "gradients of leaf parameters only"));
      }
      const uintptr_t key = node->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [weak, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
            State::OnGradReady(weak, i);
            return outputs;
          }));
      s.hooks.emplace_back(std::move(node), key);
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("DistributedDataParallel::Create: libtorch raised: ", e.what()));
  }
  return ddp;
}

absl::Status TorchDdp::BeforeForward() {
  std::lock_guard<std::mutex> lock(state_->mu);
  State& s = *state_;
  LOCKSTEP_RETURN_IF_ERROR(s.error);
  LOCKSTEP_RETURN_IF_ERROR(s.reducer->CheckPreviousIterationFinished());
  if (sync_) LOCKSTEP_RETURN_IF_ERROR(s.reducer->RebuildBucketsIfNeeded());
  // Buffers go from rank 0 before a forward that follows a synchronized one
  // only (distributed.py's require_forward_param_sync): inside no_sync they
  // stay each rank's own until the next group's first forward.
  if (options_.broadcast_buffers && s.has_buffers && require_forward_param_sync_) {
    // Bridged anew each time: a module may replace a buffer's tensor.
    std::vector<Tensor> buffers;
    try {
      for (const auto& item : s.module->named_buffers(/*recurse=*/true)) {
        if (!item.value().defined()) continue;
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor view, FromTorch(item.value()));
        buffers.push_back(std::move(view));
      }
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("DistributedDataParallel: reading the buffers: ", e.what()));
    }
    LOCKSTEP_RETURN_IF_ERROR(BroadcastFromRankZero(comm_, buffers));
  }
  // As distributed.py: a backward is prepared only when gradients are being
  // recorded and synchronized.
  if (sync_ && at::GradMode::is_enabled()) {
    s.reducer->PrepareForBackward();
    s.expect_hooks = true;
  } else {
    s.expect_hooks = false;
  }
  require_forward_param_sync_ = sync_ && at::GradMode::is_enabled();
  return absl::OkStatus();
}

absl::Status TorchDdp::ForwardFailed(const std::exception& e) const {
  return absl::InternalError(absl::StrCat("DistributedDataParallel: the module's forward raised: ", e.what()));
}

absl::Status TorchDdp::RegisterCommHook(std::unique_ptr<CommHook> hook) {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->reducer->SetCommHook(std::move(hook));
}

void TorchDdp::SetBucketObserver(std::function<void(const BucketTiming&)> observer) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->reducer->SetObserver(std::move(observer));
}

double TorchDdp::last_finalize_seconds() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->reducer->last_finalize_seconds();
}

std::vector<std::vector<size_t>> TorchDdp::bucket_indices() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->reducer->bucket_indices();
}

}  // namespace interop
}  // namespace lockstep
