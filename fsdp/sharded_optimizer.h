// ShardedOptimizer: the optimizer of FullyShard's shards (fsdp/fully_shard.h)
// whose state checkpoints as a plain optimizer's over the whole module, so
// that an FSDP checkpoint resumes on any number of ranks, under FSDP, DDP or
// one process (PyTorch's FSDP.optim_state_dict with a full state dict).
//
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<ShardedOptimizer> adam, ShardedOptimizer::Create(*fsdp,
//       [](std::vector<NamedParameter> shards) { return MakeAdam(std::move(shards)); }));
//   LOCKSTEP_RETURN_IF_ERROR(adam->Step());                   // steps this rank's shards
//   LOCKSTEP_RETURN_IF_ERROR(adam->ConsolidateState(0));      // every rank, before a checkpoint
//   std::vector<NamedTensor> full = adam->StateTensors();     // on rank 0: as a plain Adam's
//
// parameters() are the shards (FullyShard::ShardParameters), so ZeroGrad,
// a GradScaler and the training loop see the shards' gradients; the wrapped
// local optimizer steps them with this object's learning rate.
//   * ConsolidateState(to): each shard's per-element state (momentum,
//     Adam's moments) is all-gathered and cut back into the module's
//     parameters; rank `to` then returns "state.<i>.<key>" for parameter i
//     of module.NamedParameters(), shaped like it, and each scalar state
//     (Adam's step) once per parameter: exactly a plain optimizer's names
//     and values over the same training. Every rank must call it.
//   * StateTensors before any consolidation (or on another rank): this
//     rank's own flat state, "state.<unit>.<key>" (not a checkpoint).
//   * LoadStateTensors takes such a whole state (from any world size, or a
//     plain optimizer's or ZeroRedundancyOptimizer's consolidated one) and
//     keeps this rank's elements. A unit's parameters must share each
//     scalar (they stepped together); every problem is listed, and nothing
//     changes unless all pass.
#ifndef LOCKSTEP_FSDP_SHARDED_OPTIMIZER_H_
#define LOCKSTEP_FSDP_SHARDED_OPTIMIZER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fsdp/fully_shard.h"
#include "fsdp/shard_view.h"
#include "nn/optimizer.h"

namespace lockstep {

// Makes the optimizer of this rank's shards (one flat parameter per unit).
using ShardOptimizerFactory =
    std::function<absl::StatusOr<std::unique_ptr<Optimizer>>(std::vector<NamedParameter> shards)>;

class ShardedOptimizer final : public Optimizer {
 public:
  // `fsdp` (a FullyShard, or another front's ShardView) must outlive the
  // optimizer.
  static absl::StatusOr<std::unique_ptr<ShardedOptimizer>> Create(ShardView& fsdp,
                                                                  const ShardOptimizerFactory& make_local);

  absl::string_view type_name() const override { return local_->type_name(); }
  absl::Status Step() override;
  std::map<std::string, std::string> Hyperparameters() const override { return local_->Hyperparameters(); }
  absl::Status ConsolidateState(int to) override;
  std::vector<NamedTensor> StateTensors() const override;
  absl::Status LoadStateTensors(const std::vector<NamedTensor>& state) override;
  Optimizer& local() { return *local_; }

 protected:
  std::vector<StateKey> StateKeys() const override { return local_->state_keys(); }

 private:
  ShardedOptimizer(ShardView& fsdp, std::vector<NamedParameter> shards, double lr)
      : Optimizer(std::move(shards), lr), fsdp_(fsdp) {}

  // Each unit's parameters: their index in the module's NamedParameters.
  ShardView& fsdp_;
  std::vector<std::vector<size_t>> module_index_;
  std::unique_ptr<Optimizer> local_;
  std::vector<NamedTensor> consolidated_;
  bool has_consolidated_ = false;
};

}  // namespace lockstep

#endif  // LOCKSTEP_FSDP_SHARDED_OPTIMIZER_H_
