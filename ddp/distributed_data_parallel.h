// DistributedDataParallel: one process per device; each rank runs the whole
// model on its share of the batch, and gradients are averaged across ranks
// while backward still runs, as torch.nn.parallel.DistributedDataParallel.
//
//   DdpOptions options;                       // PyTorch's names and defaults
//   LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*model, *comm, options));
//   for (int step = 0; step < steps; ++step) {
//     LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, ddp->Forward(images));
//     LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult loss, CrossEntropy(logits, labels));
//     LOCKSTEP_RETURN_IF_ERROR(ddp->Backward(loss.grad_logits));  // grads now averaged
//     LOCKSTEP_RETURN_IF_ERROR(optimizer->Step());
//     LOCKSTEP_RETURN_IF_ERROR(model->ZeroGrad());
//   }
//
// At construction: every rank's parameter shapes are compared (an error on
// every rank names the first mismatch and both ranks' views), then
// parameters and buffers are broadcast from rank 0.
//
// The reducer follows PyTorch 1.13 (reducer.cpp, distributed.py):
//   * Buckets: the first iteration uses one bucket per dtype/device when
//     find_unused_parameters is false or static_graph is set, else
//     [1 MiB, bucket_cap_mb] buckets in reverse registration order; after
//     the first iteration (in the first case) the buckets are rebuilt once,
//     in the order gradients became ready on rank 0.
//   * A gradient-ready hook copies the gradient into its bucket multiplied by
//     1/world_size (with gradient_as_bucket_view the gradient IS the bucket
//     view and is divided in place); without a comm hook the bucket is then
//     all-reduced with SUM; a comm hook does its own division.
//   * A bucket's all-reduce starts as soon as its last gradient is ready, in
//     bucket order on every rank, while backward goes on; Backward() waits
//     for all of them and writes the averages into the gradients.
//   * find_unused_parameters: parameters whose hook did not fire are marked
//     ready at the end of backward; which parameters were used is
//     all-reduced, so one used on any rank is averaged everywhere and one
//     used nowhere keeps its gradient untouched.
//   * Errors as PyTorch's: a parameter whose gradient never came when
//     find_unused_parameters is false ("Expected to have finished reduction
//     in the prior iteration ...", naming the parameters, raised by the next
//     Forward), a gradient marked ready twice.
//   * NoSync(): inside the scope gradients accumulate locally, no
//     communication; the first backward after it reduces the accumulated sum.
//   * Buffers are broadcast from rank 0 before a forward that follows a
//     synchronized backward (PyTorch's require_forward_param_sync: not
//     right after a NoSync iteration).
//   * Uneven inputs: ddp/join.h.
//
// Frozen parameters (requires_grad false when Create runs) are broadcast
// with the others but left out of the buckets, as PyTorch's
// _build_params_for_reducer: no gradient, no communication. A module with
// no parameter that requires a gradient is refused, in PyTorch's words.
//
// State dicts: the plain module's names (no "module." prefix), loadable by
// PyTorch into the un-wrapped model; LoadStateDict also accepts PyTorch's
// "module."-prefixed names (see nn/checkpoint/state_dict_prefix.h).
#ifndef LOCKSTEP_DDP_DISTRIBUTED_DATA_PARALLEL_H_
#define LOCKSTEP_DDP_DISTRIBUTED_DATA_PARALLEL_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "core/tensor.h"
#include "ddp/bucket_timing.h"
#include "ddp/comm_hook.h"
#include "ddp/ddp_options.h"
#include "nn/module.h"

namespace lockstep {

class Join;
class Reducer;

class DistributedDataParallel {
 public:
  // `module` and `comm` must outlive the returned object.
  static absl::StatusOr<std::unique_ptr<DistributedDataParallel>> Create(Module& module, Communicator& comm,
                                                                         DdpOptions options = {});
  ~DistributedDataParallel();

  // Broadcasts buffers from rank 0 (broadcast_buffers), checks that the last
  // iteration's reduction finished, then runs the module's forward.
  absl::StatusOr<Tensor> Forward(const Tensor& input);
  // The module's backward with bucketed, overlapped gradient averaging;
  // returns when every gradient holds the average over ranks (or, inside
  // NoSync, the local accumulation).
  absl::Status Backward(const Tensor& grad_output);

  // Replaces the default reduction (nullptr restores it). Before the first
  // Backward, as in PyTorch.
  absl::Status RegisterCommHook(std::unique_ptr<CommHook> hook);

  // Gradient accumulation without communication while the returned object
  // lives (torch's `with ddp.no_sync():`).
  class NoSyncScope {
   public:
    explicit NoSyncScope(DistributedDataParallel* ddp) : ddp_(ddp) {}
    ~NoSyncScope();
    NoSyncScope(NoSyncScope&& other) noexcept : ddp_(other.ddp_) { other.ddp_ = nullptr; }
    NoSyncScope(const NoSyncScope&) = delete;
    NoSyncScope& operator=(const NoSyncScope&) = delete;

   private:
    DistributedDataParallel* ddp_;
  };
  NoSyncScope NoSync();

  Module& module() { return module_; }
  const DdpOptions& options() const { return options_; }
  // The buckets as parameter indices (NamedParameters order; frozen ones in
  // none), current order.
  std::vector<std::vector<size_t>> bucket_indices() const;
  // Called on the completing thread for every bucket reduction.
  void SetBucketObserver(std::function<void(const BucketTiming&)> observer);
  // Whether the next Backward reduces (false inside NoSync).
  bool sync() const { return sync_; }
  // Seconds the last synchronized Backward spent after the module's backward
  // had returned: waiting for the buckets in flight and writing the averages
  // back (Reducer::last_finalize_seconds), the communication backward did not
  // hide.
  double last_finalize_seconds() const;

 private:
  friend class Join;
  // Join's state while a Join (ddp/join.h) holds this DDP.
  struct JoinConfig {
    bool enable = false;
    bool throw_on_early_termination = false;
    bool divide_by_initial_world_size = true;
  };

  DistributedDataParallel(Module& module, Communicator& comm, DdpOptions options);
  // The buffers' broadcast before a forward; with Join, from the
  // authoritative rank (the largest that has not joined; a joined rank
  // passes is_joined and sends -1).
  absl::Status SyncBuffers(bool is_joined);
  bool ShouldSyncBuffers() const;

  Module& module_;
  Communicator& comm_;
  const DdpOptions options_;
  // fault_tolerant: the failed reduction every later Forward returns.
  absl::Status failed_;
  std::unique_ptr<Reducer> reducer_;
  // NamedParameters index -> the reducer's (kNotReduced: frozen), and back.
  static constexpr size_t kNotReduced = ~size_t{0};
  std::vector<size_t> reducer_index_;
  std::vector<size_t> module_index_;
  bool sync_ = true;
  bool has_buffers_ = false;
  // PyTorch's require_forward_param_sync: whether the last forward (or
  // Join's shadow of one) was followed by a synchronized backward; the
  // buffers are broadcast before a forward only then.
  bool require_forward_param_sync_ = true;
  JoinConfig join_;
  // This iteration's count of ranks that have not joined (Join, sum of ones).
  std::shared_ptr<Work> join_count_work_;
  Tensor join_count_;
  // The forward's "will backward be synchronized" vote (Join), kept alive.
  std::shared_ptr<Work> join_sync_work_;
  Tensor join_sync_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_DDP_DISTRIBUTED_DATA_PARALLEL_H_
