// ZeroRedundancyOptimizer: the optimizer state sharded over the ranks, as
// PyTorch 1.13's torch.distributed.optim.ZeroRedundancyOptimizer (ZeRO
// stage 1): each rank keeps the state (momentum, Adam's moments) of its own
// share of the parameters only, steps that share, and the updated
// parameters are then broadcast from their owners.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*model, *comm));
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<ZeroRedundancyOptimizer> zero,
//       ZeroRedundancyOptimizer::Create(model->NamedParameters(), *comm,
//           [](std::vector<NamedParameter> shard) { return Adam::Create(std::move(shard), AdamOptions()); }));
//   ...
//   LOCKSTEP_RETURN_IF_ERROR(zero->Step());                 // every rank, every step
//   LOCKSTEP_RETURN_IF_ERROR(zero->ConsolidateState(0));    // every rank, before a checkpoint
//   std::vector<NamedTensor> full = zero->StateTensors();   // on rank 0: as a plain Adam's
//
// Semantics, PyTorch's:
//   * Partition (PyTorch's _partition_parameters): the parameters sorted by
//     element count, largest first (ties in their order), each given to the
//     rank with the fewest elements so far (ties: the lowest rank). Frozen
//     parameters are partitioned too. A rank's local optimizer holds its
//     parameters in that order.
//   * Step: the local optimizer steps this rank's share (the learning rate
//     set on this object is passed on first); then, for each rank 0, 1, ...
//     in turn, each of its parameters is broadcast from it, in its order, all
//     launched before any is awaited. Every rank ends with the same
//     parameters as a plain optimizer would give: the arithmetic per element
//     is the same.
//   * ConsolidateState(to): the shards' state reaches rank `to` (one
//     byte-string gather of each rank's state; PyTorch broadcasts each rank's
//     pickle to every rank). StateTensors there then returns the whole state
//     under the global indices, "state.<index>.<key>", exactly as a plain
//     optimizer over the same parameters names it; elsewhere, and before any
//     consolidation, it returns this rank's own share under global indices.
//   * LoadStateTensors takes a whole state (from a consolidated checkpoint or
//     a plain optimizer's, written with any world size) and keeps the
//     entries of this rank's share: a ZeRO checkpoint resumes on any number
//     of ranks, and into a plain optimizer.
//   * type_name and Hyperparameters are the local optimizer's, so checkpoints
//     name the real optimizer.
//
// Every rank must call Step and ConsolidateState together. Not thread-safe.
#ifndef LOCKSTEP_DDP_ZERO_REDUNDANCY_OPTIMIZER_H_
#define LOCKSTEP_DDP_ZERO_REDUNDANCY_OPTIMIZER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "nn/optimizer.h"

namespace lockstep {

// Makes the optimizer of one rank's share (its parameters, in partition order).
using LocalOptimizerFactory =
    std::function<absl::StatusOr<std::unique_ptr<Optimizer>>(std::vector<NamedParameter> shard)>;

class ZeroRedundancyOptimizer final : public Optimizer {
 public:
  // `comm` must outlive the optimizer; every rank passes the same parameter
  // list (shapes, in the same order).
  static absl::StatusOr<std::unique_ptr<ZeroRedundancyOptimizer>> Create(std::vector<NamedParameter> params,
                                                                         Communicator& comm,
                                                                         const LocalOptimizerFactory& make_local);

  // PyTorch's partition of parameters with these element counts over
  // `world_size` ranks: for each rank, the indices it owns, in its order.
  static std::vector<std::vector<size_t>> Partition(const std::vector<int64_t>& numels, int world_size);

  absl::string_view type_name() const override { return local_->type_name(); }
  absl::Status Step() override;
  std::map<std::string, std::string> Hyperparameters() const override { return local_->Hyperparameters(); }
  absl::Status ConsolidateState(int to) override;
  std::vector<NamedTensor> StateTensors() const override;
  absl::Status LoadStateTensors(const std::vector<NamedTensor>& state) override;

  // This rank's parameters (indices into parameters()), in partition order.
  const std::vector<size_t>& owned() const { return partition_[comm_.rank()]; }
  const std::vector<std::vector<size_t>>& partition() const { return partition_; }
  Optimizer& local() { return *local_; }

 protected:
  std::vector<StateKey> StateKeys() const override { return local_->state_keys(); }

 private:
  ZeroRedundancyOptimizer(std::vector<NamedParameter> params, double lr, Communicator& comm)
      : Optimizer(std::move(params), lr), comm_(comm) {}
  // This rank's local state renamed to global indices.
  std::vector<NamedTensor> OwnStateGlobal() const;

  Communicator& comm_;
  std::vector<std::vector<size_t>> partition_;
  std::unique_ptr<Optimizer> local_;
  // After ConsolidateState on the target rank: the whole state.
  std::vector<NamedTensor> consolidated_;
  bool has_consolidated_ = false;
};

}  // namespace lockstep

#endif  // LOCKSTEP_DDP_ZERO_REDUNDANCY_OPTIMIZER_H_
