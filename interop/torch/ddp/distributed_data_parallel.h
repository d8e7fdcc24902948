// DistributedDataParallel for libtorch modules: what
// torch.nn.parallel.DistributedDataParallel does for Python, for a
// torch::nn::Module in C++ (libtorch has none), on lockstep's collectives
// and the same reducer as lockstep's own DDP (ddp/reducer.h).
//
//   auto model = std::make_shared<Net>();                  // your module
//   LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, interop::DistributedDataParallel<Net>::Create(model, *comm));
//   torch::optim::SGD optimizer(model->parameters(), /*lr=*/0.1);
//   for (auto& batch : *loader) {
//     LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor out, ddp->Forward(batch.data));
//     torch::Tensor loss = torch::nn::functional::cross_entropy(out, batch.target);
//     loss.backward();                                     // gradients averaged across ranks
//     optimizer.step();
//     optimizer.zero_grad();
//   }
//
// The user's loop, loss and torch::optim optimizer stay as they are: only
// the forward goes through Forward(). As PyTorch's DDP:
//   * At Create: parameters that require a gradient are the ones averaged
//     (frozen ones are left alone; a parameter shared by two submodules
//     counts once); every rank's list is compared (an error on every rank
//     names the first mismatch), then rank 0's parameters and buffers are
//     broadcast.
//   * Forward: the error of the last backward's reduction if it failed, the
//     "Expected to have finished reduction in the prior iteration" error
//     when it left gradients unreduced; the buckets rebuilt once after the
//     first iteration; the buffers broadcast from rank 0
//     (broadcast_buffers); then the module's forward.
//   * backward: a post-hook on each parameter's AccumulateGrad node (as
//     reducer.cpp) copies the gradient into its bucket (times 1/world),
//     full buckets are all-reduced while backward goes on, and a callback
//     queued on the autograd engine waits for them and writes the averages
//     into param.grad() before backward() returns. With
//     gradient_as_bucket_view, param.grad() becomes a view of its bucket.
//   * NoSync(): gradients accumulate locally; the first backward after the
//     scope reduces the sum. Buffers are broadcast before a forward that
//     follows a synchronized one only, so inside NoSync each rank keeps its
//     own (PyTorch's require_forward_param_sync). find_unused_parameters, static_graph and comm
//     hooks (ddp/comm_hook.h) as in DdpOptions.
//
// Weights to start from: load them into the libtorch module itself, before
// Create (Create then broadcasts rank 0's, so only rank 0 needs the file):
// torch::load(model, "net.pt") for libtorch's own archives, or, for a
// safetensors file PyTorch wrote (save_file(model.state_dict(), ...)):
//
//   LOCKSTEP_ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensorsFile(path));   // nn/checkpoint/safetensors.h
//   torch::NoGradGuard no_grad;
//   auto params = model->named_parameters(), buffers = model->named_buffers();
//   for (auto& [name, value] : file.tensors) {
//     LOCKSTEP_ASSIGN_OR_RETURN(at::Tensor t, ToTorch(value));                   // bridge/tensor_bridge.h
//     (params.contains(name) ? params[name] : buffers[name]).copy_(t);
//   }
//
// Not through TorchModule (bridge/torch_module.h) and LoadModel: a
// TorchModule gives every parameter a zero gradient at once (so that torch
// accumulates into one tensor), where a fresh PyTorch module's .grad is
// None until the first backward; training is the same, a check of
// grad().defined() against PyTorch is not.
//
// DdpOptions (ddp/ddp_options.h, namespace lockstep, shared with lockstep's
// own DDP) has PyTorch's names and defaults: bucket_cap_mb (25),
// find_unused_parameters, gradient_as_bucket_view, broadcast_buffers,
// static_graph, and first_bucket_bytes (PyTorch's module-level
// dist._DEFAULT_FIRST_BUCKET_BYTES, 1 MiB). As in PyTorch, the first
// iteration uses one bucket for all gradients (without
// find_unused_parameters), and the buckets rebuilt after it take
// first_bucket_bytes for the first bucket and bucket_cap_mb for the rest:
// a small bucket_cap_mb alone still gives a model under 1 MiB one bucket;
// lower first_bucket_bytes too to get several.
//
// gradient_as_bucket_view: each param.grad() is then a tensor on its
// bucket's storage at the bucket offset, as PyTorch's narrow() views are
// (the gradients of one bucket are is_alias_of each other). They are made
// with set_(), not as autograd views: libtorch's C++ Optimizer::zero_grad
// calls detach_() on every gradient, which an autograd view refuses
// (Python's zero_grad steers around it). libtorch 1.13's zero_grad()
// zeroes them in place, in their buckets; 2.x's zero_grad() sets them to
// none by default, and the next backward makes them bucket views again.
// Errors: DDP's own calls return absl::Status. An error inside backward (a
// collective failed, a gradient came twice) is raised by loss.backward() as
// libtorch's c10::Error carrying lockstep's message, and the next Forward
// returns it. Nothing hangs: collectives have the communicator's deadline.
//
// The module is not wrapped: its names and state dict are the plain
// module's (no "module." prefix), so checkpoints are what the single-process
// program writes. Written as safetensors (FromTorch, WriteSafetensorsFile)
// they load in Python with load_state_dict(strict=True)
// (interop/torch/ddp/testdata/load_checkpoint.py).
#ifndef LOCKSTEP_INTEROP_TORCH_DDP_DISTRIBUTED_DATA_PARALLEL_H_
#define LOCKSTEP_INTEROP_TORCH_DDP_DISTRIBUTED_DATA_PARALLEL_H_

#include <torch/nn/module.h>

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "collectives/communicator.h"
#include "core/status.h"
#include "ddp/bucket_timing.h"
#include "ddp/comm_hook.h"
#include "ddp/ddp_options.h"

namespace lockstep {
namespace interop {

// Everything of DistributedDataParallel<M> but the typed forward.
class TorchDdp {
 public:
  static absl::StatusOr<std::unique_ptr<TorchDdp>> Create(torch::nn::Module& module, Communicator& comm,
                                                          DdpOptions options);
  ~TorchDdp();

  // Before the module's forward (see the header comment).
  absl::Status BeforeForward();
  // A libtorch exception from the module's forward as a Status.
  absl::Status ForwardFailed(const std::exception& e) const;

  absl::Status RegisterCommHook(std::unique_ptr<CommHook> hook);
  // Told of each bucket's reduction, launch to completion (traces); called
  // on the thread that completed it. Null: none.
  void SetBucketObserver(std::function<void(const BucketTiming&)> observer);
  std::vector<std::vector<size_t>> bucket_indices() const;
  // The averaged parameters' names, in bucket-index order.
  const std::vector<std::string>& parameter_names() const { return names_; }
  void set_sync(bool sync) { sync_ = sync; }
  bool sync() const { return sync_; }
  // Seconds the last synchronized backward spent reducing after libtorch's
  // backward had finished (Reducer::last_finalize_seconds): the exposed
  // communication of that step.
  double last_finalize_seconds() const;

 private:
  struct State;
  explicit TorchDdp(Communicator& comm, DdpOptions options);

  Communicator& comm_;
  const DdpOptions options_;
  std::vector<std::string> names_;
  std::shared_ptr<State> state_;  // Shared with the hooks.
  bool sync_ = true;
  // Whether the last forward was followed by a synchronized backward: the
  // buffers are broadcast before a forward only then (as PyTorch's).
  bool require_forward_param_sync_ = true;
};

template <typename M>
class DistributedDataParallel {
 public:
  static absl::StatusOr<std::unique_ptr<DistributedDataParallel>> Create(std::shared_ptr<M> module, Communicator& comm,
                                                                         DdpOptions options = {}) {
    if (module == nullptr) return absl::InvalidArgumentError("DistributedDataParallel: the module is null");
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TorchDdp> core, TorchDdp::Create(*module, comm, options));
    return std::unique_ptr<DistributedDataParallel>(new DistributedDataParallel(std::move(module), std::move(core)));
  }

  // The module's forward(args...), after DDP's checks and broadcasts.
  template <typename... Args>
  auto Forward(Args&&... args) -> absl::StatusOr<decltype(std::declval<M&>().forward(std::forward<Args>(args)...))> {
    LOCKSTEP_RETURN_IF_ERROR(core_->BeforeForward());
    try {
      return module_->forward(std::forward<Args>(args)...);
    } catch (const std::exception& e) {
      return core_->ForwardFailed(e);
    }
  }

  // Gradients accumulate locally while the scope lives.
  class NoSyncScope {
   public:
    NoSyncScope(NoSyncScope&& other) noexcept : core_(std::exchange(other.core_, nullptr)) {}
    ~NoSyncScope() {
      if (core_ != nullptr) core_->set_sync(true);
    }

   private:
    friend class DistributedDataParallel;
    explicit NoSyncScope(TorchDdp* core) : core_(core) { core_->set_sync(false); }
    TorchDdp* core_;
  };
  NoSyncScope NoSync() { return NoSyncScope(core_.get()); }

  // Before the first backward (as PyTorch).
  absl::Status RegisterCommHook(std::unique_ptr<CommHook> hook) { return core_->RegisterCommHook(std::move(hook)); }
  void SetBucketObserver(std::function<void(const BucketTiming&)> observer) {
    core_->SetBucketObserver(std::move(observer));
  }
  // Parameter indices per bucket (parameter_names() order).
  std::vector<std::vector<size_t>> bucket_indices() const { return core_->bucket_indices(); }
  const std::vector<std::string>& parameter_names() const { return core_->parameter_names(); }

  M& module() { return *module_; }
  const std::shared_ptr<M>& module_ptr() const { return module_; }

 private:
  DistributedDataParallel(std::shared_ptr<M> module, std::unique_ptr<TorchDdp> core)
      : module_(std::move(module)), core_(std::move(core)) {}

  std::shared_ptr<M> module_;
  std::unique_ptr<TorchDdp> core_;
};

}  // namespace interop
}  // namespace lockstep

#endif  // LOCKSTEP_INTEROP_TORCH_DDP_DISTRIBUTED_DATA_PARALLEL_H_
