// FullyShard: fully sharded data parallel for lockstep's nn (PyTorch's FSDP
// and FSDP2's fully_shard, DeepSpeed's ZeRO-3): each rank keeps only its
// shard of every parameter, gradient and optimizer state; a unit's
// parameters are all-gathered just before its forward and again before its
// backward, and its gradients are reduce-scattered right after.
//
//   FullyShardOptions options;
//   options.units = {"1", "3", "5"};   // module paths; empty: each child of the root with parameters
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FullyShard> fsdp, FullyShard::Create(*model, *comm, options));
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> sgd, Sgd::Create(fsdp->ShardParameters(), SgdOptions{0.1}));
//   LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, fsdp->Forward(images));
//   LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult loss, CrossEntropy(logits, labels));
//   LOCKSTEP_RETURN_IF_ERROR(fsdp->Backward(loss.grad_logits));   // shard gradients now averaged
//   LOCKSTEP_RETURN_IF_ERROR(sgd->Step());                        // steps this rank's shards
//   LOCKSTEP_RETURN_IF_ERROR(sgd->ZeroGrad(/*set_to_none=*/true));
//
// Units and shards:
//   * A unit is a submodule named by its path (NamedModules), run by a
//     container (Sequential) so that its ModuleHooks fire; units do not
//     nest. The root unit holds every parameter outside the named units and
//     stays gathered from the start of Forward to the end of Backward.
//   * Each unit's parameters form one flat f32 buffer, padded to a multiple
//     of the world size (fsdp/flat_shard.h); rank r keeps elements
//     [r * shard, (r + 1) * shard) as ShardParameters()[unit], named
//     "<unit path>.flat_param" ("flat_param" for the root), which the user's
//     optimizer steps. Padding stays zero under SGD and Adam (zero gradient).
//   * At Create, every rank's parameter shapes are compared and rank 0's
//     parameters and buffers are broadcast (sync_module_states), then the
//     module's own parameter tensors are dropped: outside a unit's forward
//     or backward its Parameter::value is undefined. Buffers (BatchNorm's
//     running statistics) stay whole and per rank, as FSDP keeps them.
//
// One step:
//   * Forward: before a unit's forward its shards are all-gathered into its
//     flat buffer and its parameters become views of it; with prefetch the
//     next unit's all-gather (in the order the first forward ran them) is
//     issued at the same time, so it runs during this unit's compute. After
//     the forward, with reshard_after_forward, the buffer's memory is freed
//     (Storage::Release: the views a layer saved for backward stay, without
//     memory) and the parameters are undefined again.
//   * Backward: before a unit's backward it is gathered again (the previous
//     unit's all-gather prefetched) and its parameters' gradients become
//     views of one flat buffer, so the layers accumulate into it directly;
//     after it, the buffer is multiplied by float(1 / world) in place (DDP's
//     arithmetic, ddp/reducer.cc) and reduce-scattered with SUM while the
//     next unit's backward runs; the gradients and the gathered buffer are
//     freed. Backward returns when every shard's gradient is final: written
//     into ShardParameters()[i].grad when that is undefined, added to it
//     otherwise (PyTorch's accumulation across steps without zero_grad).
//     Every unit is resharded after Backward.
//   * NoSync(): inside the scope backward reduces nothing and the unsharded
//     gradients accumulate in the parameters; the first backward after it
//     reduce-scatters the accumulated sum (FSDP's no_sync, DDP's rule).
//
// Equivalence with DDP: every rank computes its forward and backward with
// the same parameter bits as DDP's replica, each gradient element is
// multiplied by the same float(1/world) and reduced with SUM; at world 2 the
// sum of two terms does not depend on the algorithm's order, and the
// optimizers' updates are elementwise, so the parameters are bit-identical
// to DDP's at every step (fully_shard_test checks it). At world > 2 the
// reduce-scatter may add the terms in another order than DDP's all-reduce:
// each element then differs by at most (world - 1) roundings of the sum.
//
// Memory per rank: the shards (parameters, gradients and optimizer state:
// 16 Psi / world bytes under Adam), the root unit, and at most two other
// units' gathered parameters and gradients at a time (the running one and
// the prefetched one).
//
// Not yet: frozen parameters (refused at Create), mixed-precision
// gathering (the libtorch front has it). Every rank must run the same units in the
// same order. Not thread-safe.
#ifndef LOCKSTEP_FSDP_FULLY_SHARD_H_
#define LOCKSTEP_FSDP_FULLY_SHARD_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "core/storage.h"
#include "core/tensor.h"
#include "fsdp/flat_shard.h"
#include "fsdp/shard_view.h"
#include "nn/module.h"

namespace lockstep {

struct FullyShardOptions {
  // Module paths of the units; empty: each direct child of the root that
  // has parameters.
  std::vector<std::string> units;
  // Free a unit's gathered parameters after its forward (gather again for
  // backward). The root unit is never resharded between forward and
  // backward.
  bool reshard_after_forward = true;
  // Issue the next unit's all-gather (forward) or the previous one's
  // (backward) before running a unit.
  bool prefetch = true;
};

class FlatUnit;

class FullyShard : public ShardView {
 public:
  // `module` and `comm` must outlive the returned object. Collective: every
  // rank calls it with the same model and options.
  static absl::StatusOr<std::unique_ptr<FullyShard>> Create(Module& module, Communicator& comm,
                                                            FullyShardOptions options = {});
  // Waits for operations in flight and removes the hooks. The module's
  // parameters stay undefined: take FullStateDict() first to keep them.
  ~FullyShard();
  FullyShard(const FullyShard&) = delete;
  FullyShard& operator=(const FullyShard&) = delete;

  absl::StatusOr<Tensor> Forward(const Tensor& input);
  absl::Status Backward(const Tensor& grad_output);

  // One flat f32 shard per unit, root first then the named units in
  // options order; give them to the optimizer.
  std::vector<NamedParameter> ShardParameters() override;

  // Collective. The whole model as the plain module's state_dict (names,
  // order, parameters then buffers per module), on every rank: copies.
  absl::StatusOr<std::vector<NamedTensor>> FullStateDict();
  // Loads a whole state (FullStateDict's or a plain module's, from any
  // world size) into this rank's shards and the buffers. With `strict`,
  // missing and unexpected names are errors; a wrong shape or dtype always
  // is; every problem is listed and nothing changes unless all pass.
  absl::Status LoadFullStateDict(const std::vector<NamedTensor>& state, bool strict = true);

  // Collective (PyTorch's FSDP.summon_full_params). Every parameter of the
  // module becomes a whole tensor (a view of its unit's gathered copy) and
  // the units' hooks stand aside, so the plain module can be evaluated
  // (each rank its own number of batches: nothing collective runs), saved,
  // or loaded into.
  // Costs the whole model's parameters on every rank until
  // ReleaseFullParameters. Forward, Backward and the state-dict methods are
  // refused meanwhile.
  absl::Status SummonFullParameters();
  // Ends it. With `write_back` the module's parameters (as a load left them)
  // are copied into this rank's shards first; then they are undefined again
  // (and any gradients the plain module computed meanwhile are dropped).
  absl::Status ReleaseFullParameters(bool write_back);
  bool summoned() const { return summoned_; }

  class NoSyncScope {
   public:
    explicit NoSyncScope(FullyShard* fsdp) : fsdp_(fsdp) {}
    ~NoSyncScope();
    NoSyncScope(NoSyncScope&& other) noexcept : fsdp_(other.fsdp_) { other.fsdp_ = nullptr; }
    NoSyncScope(const NoSyncScope&) = delete;
    NoSyncScope& operator=(const NoSyncScope&) = delete;

   private:
    FullyShard* fsdp_;
  };
  NoSyncScope NoSync();

  // The units' paths, root ("") first, and their layouts.
  std::vector<std::string> unit_paths() const override;
  size_t num_units() const override { return units_.size(); }
  const FlatShardLayout& layout(size_t unit) const override;
  // Unit `unit`'s parameters in its flat order: names (NamedParameters') and
  // shapes.
  std::vector<std::pair<std::string, Shape>> unit_parameters(size_t unit) const override;
  // The module's NamedParameters' names.
  std::vector<std::string> parameter_names() const override;
  Communicator& comm() override { return comm_; }
  // How many units hold gathered parameters now (tests; memory accounting).
  int gathered_units() const;
  Module& module() { return module_; }

 private:
  struct Unit;
  FullyShard(Module& module, Communicator& comm, FullyShardOptions options);

  absl::Status IssueGather(size_t u);
  absl::Status Unshard(size_t u);
  absl::Status Reshard(size_t u);
  // Before a unit's backward: its gradients become views of its flat
  // gradient (unless NoSync accumulated some already).
  absl::Status PrepareGrads(size_t u);
  absl::Status ReduceGrads(size_t u);
  // Waits for the gradient reductions in flight (all but unit `except`'s)
  // and writes them into the shards' gradients.
  absl::Status FinishGradients(size_t except = ~size_t{0});
  absl::Status PreForward(size_t u);
  absl::Status PostForward(size_t u);
  absl::Status PreBackward(size_t u);
  absl::Status PostBackward(size_t u);
  // Waits for everything in flight and reshards every unit (after an error,
  // and before each Forward).
  absl::Status Settle();

  Module& module_;
  Communicator& comm_;
  const FullyShardOptions options_;
  std::vector<std::unique_ptr<Unit>> units_;  // [0] is the root unit.
  static constexpr size_t kNone = ~size_t{0};
  // The unit `step` places after (+1) or before (-1) unit `u` in the order
  // the first forward ran them; kNone when there is none (or no order yet).
  size_t Neighbour(size_t u, int step) const;

  // Named units in the order the first forward ran them, and each unit's
  // place in it (kNone: the root, or a unit that did not run).
  std::vector<size_t> order_;
  std::vector<size_t> position_;
  bool order_known_ = false;
  bool sync_ = true;
  bool summoned_ = false;
  // FailedPrecondition naming `op` while summoned.
  absl::Status NotSummoned(const char* op) const;
};

}  // namespace lockstep

#endif  // LOCKSTEP_FSDP_FULLY_SHARD_H_
