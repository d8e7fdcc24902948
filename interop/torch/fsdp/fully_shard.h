// FullyShard for libtorch modules: fully sharded data parallel (PyTorch's
// FSDP, ZeRO-3) for a torch::nn::Module in C++, on lockstep's collectives
// and the same core as lockstep's own FullyShard (fsdp/flat_unit.h).
//
//   auto model = std::make_shared<NetImpl>();    // its blocks built as Sharded(Block(...))
//   LOCKSTEP_ASSIGN_OR_RETURN(auto fsdp, interop::FullyShard<NetImpl>::Create(model, *comm));
//   torch::optim::SGD optimizer(fsdp->shard_parameters(), /*lr=*/0.1);
//   for (auto& batch : *loader) {
//     LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor out, fsdp->Forward(batch.data));
//     torch::Tensor loss = torch::nn::functional::cross_entropy(out, batch.target);
//     loss.backward();                         // shard gradients averaged across ranks
//     optimizer.step();                        // steps this rank's shards
//     optimizer.zero_grad();
//   }
//
// Units: every submodule built as Sharded(...) (interop/torch/fsdp/
// sharded_unit.h; libtorch has no forward hooks, so units are marked where
// the model is built), and the root unit with every other parameter. Units
// do not nest.
//
// What happens, as in lockstep's FullyShard (fsdp/fully_shard.h):
//   * Create: parameter shapes compared across ranks, rank 0's parameters
//     and buffers broadcast; then each unit's parameters become views of
//     one flat buffer (param.set_data) whose memory is freed
//     (storage resize to 0, as FSDP1's _free_storage) whenever the unit is
//     not running: outside Forward and backward only the shards, f32, live.
//     shard_parameters() are those shards, one flat tensor per unit, for
//     the user's torch::optim optimizer.
//   * Forward: the root unit is gathered, then each unit just before its
//     forward (the next unit's all-gather prefetched), and freed after it
//     (reshard_after_forward).
//   * backward: a hook on each unit's output gathers it again (prefetching
//     the previous unit) before autograd runs its backward; a post-hook on
//     its parameters' AccumulateGrad nodes, once all have fired, multiplies
//     the gradients by float(1/world) into a flat buffer (DDP's arithmetic),
//     starts the reduce-scatter and frees the unit; the root unit and any
//     unit with unused parameters are reduced by a callback at the end of
//     backward, which also writes every shard's gradient (set when
//     undefined, added otherwise) before loss.backward() returns.
//   * NoSync(): the unsharded gradients accumulate in param.grad() and the
//     next synchronized backward reduces their sum.
//   * Mixed precision (options.mixed_precision): parameters gathered and
//     used in param_dtype (bf16 or f16; the model's inputs must be of that
//     dtype too), gradients reduced in reduce_dtype, shards in f32.
//
// At world 2 in f32 the parameters are bit-identical to lockstep's libtorch
// DDP (interop/torch/ddp) at every step, given an optimizer whose update is
// elementwise (SGD, Adam): fully_shard_test checks ResNet-18 and the
// character Transformer. CPU tensors only; frozen parameters are refused.
// Errors: Forward returns a Status; an error inside backward is raised by
// loss.backward() as libtorch's c10::Error and returned by the next Forward.
#ifndef LOCKSTEP_INTEROP_TORCH_FSDP_FULLY_SHARD_H_
#define LOCKSTEP_INTEROP_TORCH_FSDP_FULLY_SHARD_H_

#include <torch/nn/module.h>

#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "core/status.h"
#include "fsdp/flat_unit.h"
#include "interop/torch/fsdp/sharded_unit.h"

namespace lockstep {
namespace interop {

struct TorchFullyShardOptions {
  bool reshard_after_forward = true;
  bool prefetch = true;
  MixedPrecisionPolicy mixed_precision;
};

// Everything of FullyShard<M> but the typed forward.
class TorchFsdp {
 public:
  static absl::StatusOr<std::unique_ptr<TorchFsdp>> Create(torch::nn::Module& module, Communicator& comm,
                                                           TorchFullyShardOptions options);
  ~TorchFsdp();

  absl::Status BeforeForward();
  void AfterForward();
  absl::Status ForwardFailed(const std::exception& e);

  std::vector<at::Tensor> shard_parameters() const;
  // Collective: every parameter (named_parameters order, f32) then every
  // buffer (named_buffers order), copies, the plain module's names.
  absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> FullStateDict();
  // A whole state (FullStateDict's or a plain module's, from any world
  // size) into this rank's shards and the buffers; every problem is listed
  // and nothing changes unless all pass.
  absl::Status LoadFullStateDict(const std::vector<std::pair<std::string, at::Tensor>>& state, bool strict = true);

  // Collective (FSDP's summon_full_params): every parameter's data becomes
  // a whole f32 tensor (a view of its unit's gathered copy) and the units'
  // gathers stand aside, so the plain module can be evaluated (each rank its
  // own number of batches), saved or loaded into. Forward and the state-dict methods are refused
  // until ReleaseFullParameters.
  absl::Status SummonFullParameters();
  // Ends it; with `write_back` the parameters' values go into this rank's
  // shards first. Their gradients are dropped.
  absl::Status ReleaseFullParameters(bool write_back);
  // A forward that failed without a libtorch exception (a Status): settles
  // as ForwardFailed does and returns `status`.
  absl::Status ForwardFailed(const absl::Status& status);

  void set_sync(bool sync);
  // The units' paths, root ("") first.
  std::vector<std::string> unit_paths() const;
  // Unit u's layout and its parameters (names and sizes) in flat order; all
  // parameter names in named_parameters order; the group.
  const FlatShardLayout& layout(size_t unit) const;
  std::vector<std::pair<std::string, Shape>> unit_parameters(size_t unit) const;
  std::vector<std::string> parameter_names() const;
  Communicator& comm() const;
  // Units whose parameters are gathered (or being gathered) now.
  int gathered_units() const;

  struct State;

 private:
  TorchFsdp() = default;
  std::shared_ptr<State> state_;  // Shared, weakly, with the hooks.
};

template <typename M>
class FullyShard {
 public:
  static absl::StatusOr<std::unique_ptr<FullyShard>> Create(std::shared_ptr<M> module, Communicator& comm,
                                                            TorchFullyShardOptions options = {}) {
    if (module == nullptr) return absl::InvalidArgumentError("FullyShard: the module is null");
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TorchFsdp> core, TorchFsdp::Create(*module, comm, options));
    return std::unique_ptr<FullyShard>(new FullyShard(std::move(module), std::move(core)));
  }

  // The module's forward(args...), between the root unit's gather and the
  // recording of the units' order.
  template <typename... Args>
  auto Forward(Args&&... args) -> absl::StatusOr<decltype(std::declval<M&>().forward(std::forward<Args>(args)...))> {
    LOCKSTEP_RETURN_IF_ERROR(core_->BeforeForward());
    try {
      auto out = module_->forward(std::forward<Args>(args)...);
      core_->AfterForward();
      return out;
    } catch (const std::exception& e) {
      return core_->ForwardFailed(e);
    }
  }

  class NoSyncScope {
   public:
    NoSyncScope(NoSyncScope&& other) noexcept : core_(std::exchange(other.core_, nullptr)) {}
    ~NoSyncScope() {
      if (core_ != nullptr) core_->set_sync(true);
    }

   private:
    friend class FullyShard;
    explicit NoSyncScope(TorchFsdp* core) : core_(core) { core_->set_sync(false); }
    TorchFsdp* core_;
  };
  NoSyncScope NoSync() { return NoSyncScope(core_.get()); }

  std::vector<at::Tensor> shard_parameters() const { return core_->shard_parameters(); }
  absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> FullStateDict() { return core_->FullStateDict(); }
  absl::Status LoadFullStateDict(const std::vector<std::pair<std::string, at::Tensor>>& state, bool strict = true) {
    return core_->LoadFullStateDict(state, strict);
  }
  std::vector<std::string> unit_paths() const { return core_->unit_paths(); }
  int gathered_units() const { return core_->gathered_units(); }
  M& module() { return *module_; }

 private:
  FullyShard(std::shared_ptr<M> module, std::unique_ptr<TorchFsdp> core)
      : module_(std::move(module)), core_(std::move(core)) {}
  std::shared_ptr<M> module_;
  std::unique_ptr<TorchFsdp> core_;
};

}  // namespace interop
}  // namespace lockstep

#endif  // LOCKSTEP_INTEROP_TORCH_FSDP_FULLY_SHARD_H_
