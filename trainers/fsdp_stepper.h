// FsdpStepper: the training loop's ModelStepper over FullyShard
// (fsdp/fully_shard.h): each rank keeps a shard of every parameter,
// gradient and optimizer state, and the loop's optimizer is a
// ShardedOptimizer (fsdp/sharded_optimizer.h) over the shards.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FsdpStepper> stepper, FsdpStepper::Create(*model, *comm));
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<ShardedOptimizer> optimizer, ShardedOptimizer::Create(
//       stepper->fsdp(), [](std::vector<NamedParameter> shards) { return MakeAdam(std::move(shards)); }));
//   parts.stepper = stepper.get();
//   parts.optimizer = optimizer.get();
//
// What the loop does through it:
//   * Forward and Backward are FullyShard's; Backward returns with every
//     shard's gradient averaged over the ranks.
//   * Accumulation (SetSync(false)): FullyShard's NoSync.
//   * Clipping: ClipShardedGradNorm (fsdp/clip_grad.h), the norm over every
//     rank's shards.
//   * Evaluation, checkpoints and resume run on the plain module between
//     SummonModule and ReleaseModule (FullyShard::SummonFullParameters): for
//     their duration every rank holds the whole parameters. The checkpoint is
//     the plain model's file (loads in PyTorch, and under DDP or one process
//     at any world size: the optimizer's state is consolidated as a plain
//     optimizer's).
// Not with uneven shards (a rank that ran out of data would have to shadow
// every unit's gathers), nor with a GradScaler that is enabled (its Inf/NaN
// check sees only this rank's shard: the loop refuses through the trainers'
// flag checks).
#ifndef LOCKSTEP_TRAINERS_FSDP_STEPPER_H_
#define LOCKSTEP_TRAINERS_FSDP_STEPPER_H_

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "fsdp/fully_shard.h"
#include "nn/module.h"
#include "trainers/model_stepper.h"

namespace lockstep {

class FsdpStepper : public ModelStepper {
 public:
  // `module` and `comm` must outlive the stepper. Collective.
  static absl::StatusOr<std::unique_ptr<FsdpStepper>> Create(Module& module, Communicator& comm,
                                                             FullyShardOptions options = {});

  Module& module() override { return fsdp_->module(); }
  absl::StatusOr<Tensor> Forward(const Tensor& input) override { return fsdp_->Forward(input); }
  absl::Status Backward(const Tensor& grad_output) override { return fsdp_->Backward(grad_output); }
  absl::Status BeginShard() override;
  absl::Status SetSync(bool sync) override;
  uint64_t BytesSent() override;
  absl::StatusOr<double> ClipGradNorm(const std::vector<Parameter*>& parameters, double max_norm) override;
  absl::Status SummonModule() override { return fsdp_->SummonFullParameters(); }
  absl::Status ReleaseModule(bool write_back) override { return fsdp_->ReleaseFullParameters(write_back); }

  FullyShard& fsdp() { return *fsdp_; }

 private:
  explicit FsdpStepper(std::unique_ptr<FullyShard> fsdp) : fsdp_(std::move(fsdp)) {}
  std::unique_ptr<FullyShard> fsdp_;
  std::optional<FullyShard::NoSyncScope> no_sync_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_TRAINERS_FSDP_STEPPER_H_
