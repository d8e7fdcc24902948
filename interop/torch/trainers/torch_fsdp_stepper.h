// TorchFsdpStepper: the training loop's ModelStepper (trainers/train_loop.h)
// for a libtorch model under interop/torch's fully sharded data parallel
// (interop/torch/fsdp/fully_shard.h), seen by the loop through its
// TorchModule. It is also the ShardView (fsdp/shard_view.h) that lockstep's
// ShardedOptimizer and sharded clipping work on, so the loop's optimizer
// steps this rank's flat f32 shards and checkpoints as a plain optimizer.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TorchModule> model, TorchModule::Create(net));  // Sharded blocks
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TorchFsdpStepper> stepper, TorchFsdpStepper::Create(*model, comm));
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<ShardedOptimizer> optimizer, ShardedOptimizer::Create(
//       *stepper, [](std::vector<NamedParameter> shards) { return MakeAdam(std::move(shards)); }));
//   parts.stepper = stepper.get();
//   parts.optimizer = optimizer.get();
//
// Forward gathers the root unit and runs the module (each Sharded unit
// gathers itself); Backward is libtorch's, during which the units'
// gradients are reduce-scattered, and returns with every shard's gradient
// averaged. Accumulation is FSDP's NoSync. Evaluation, checkpoints and
// resume run on the TorchModule between SummonModule and ReleaseModule:
// the whole parameters, the plain model's file.
#ifndef LOCKSTEP_INTEROP_TORCH_TRAINERS_TORCH_FSDP_STEPPER_H_
#define LOCKSTEP_INTEROP_TORCH_TRAINERS_TORCH_FSDP_STEPPER_H_

#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "fsdp/shard_view.h"
#include "interop/torch/bridge/torch_module.h"
#include "interop/torch/fsdp/fully_shard.h"
#include "trainers/train_loop.h"

namespace lockstep {
namespace interop {

class TorchFsdpStepper : public ModelStepper, public ShardView {
 public:
  // `module` (its blocks marked Sharded) and `comm` must outlive the
  // stepper. Collective.
  static absl::StatusOr<std::unique_ptr<TorchFsdpStepper>> Create(TorchModule& module, Communicator& comm,
                                                                  TorchFullyShardOptions options = {});

  // ModelStepper.
  Module& module() override { return module_; }
  absl::StatusOr<Tensor> Forward(const Tensor& input) override;
  absl::Status Backward(const Tensor& grad_output) override;
  absl::Status SetSync(bool sync) override;
  uint64_t BytesSent() override;
  absl::StatusOr<double> ClipGradNorm(const std::vector<Parameter*>& parameters, double max_norm) override;
  absl::Status SummonModule() override;
  absl::Status ReleaseModule(bool write_back) override;

  // ShardView.
  std::vector<NamedParameter> ShardParameters() override;
  size_t num_units() const override { return shards_.size(); }
  std::vector<std::string> unit_paths() const override { return core_->unit_paths(); }
  const FlatShardLayout& layout(size_t unit) const override { return core_->layout(unit); }
  std::vector<std::pair<std::string, Shape>> unit_parameters(size_t unit) const override {
    return core_->unit_parameters(unit);
  }
  std::vector<std::string> parameter_names() const override { return core_->parameter_names(); }
  Communicator& comm() override { return core_->comm(); }

  TorchFsdp& fsdp() { return *core_; }

 private:
  TorchFsdpStepper(TorchModule& module, std::unique_ptr<TorchFsdp> core) : module_(module), core_(std::move(core)) {}

  TorchModule& module_;
  std::unique_ptr<TorchFsdp> core_;
  // The shards as lockstep parameters (the libtorch shards' memory); each
  // gradient is bridged from the libtorch shard's after every backward.
  std::deque<Parameter> shards_;
};

}  // namespace interop
}  // namespace lockstep

#endif  // LOCKSTEP_INTEROP_TORCH_TRAINERS_TORCH_FSDP_STEPPER_H_
