// TorchDdpStepper: the training loop's ModelStepper (trainers/train_loop.h)
// for a libtorch model: interop/torch's DistributedDataParallel on the
// libtorch module, seen by the loop through its TorchModule. Forward runs
// DDP's checks and buffer broadcast, then the module's forward; backward is
// libtorch's, during which DDP's hooks all-reduce the buckets. With a trace
// attached, every bucket's all-reduce is an event on the communication row.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TorchModule> model, TorchModule::Create(net));
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TorchDdpStepper> stepper,
//                             TorchDdpStepper::Create(*model, comm, DdpOptions{}));  // the group's
//   parts.stepper = stepper.get();
//   parts.comm = &comm;
//   LOCKSTEP_ASSIGN_OR_RETURN(TrainResult result, RunTraining(options, parts));
#ifndef LOCKSTEP_INTEROP_TORCH_TRAINERS_TORCH_DDP_STEPPER_H_
#define LOCKSTEP_INTEROP_TORCH_TRAINERS_TORCH_DDP_STEPPER_H_

#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "ddp/ddp_options.h"
#include "interop/torch/bridge/torch_module.h"
#include "interop/torch/ddp/distributed_data_parallel.h"
#include "trainers/train_loop.h"

namespace lockstep {
namespace interop {

class TorchDdpStepper : public ModelStepper {
 public:
  // `module` and `comm` must outlive the stepper.
  static absl::StatusOr<std::unique_ptr<TorchDdpStepper>> Create(TorchModule& module, Communicator& comm,
                                                                 const DdpOptions& options);

  Module& module() override { return module_; }
  absl::StatusOr<Tensor> Forward(const Tensor& input) override;
  absl::Status Backward(const Tensor& grad_output) override;
  void AttachTrace(TraceRecorder* trace) override;
  // Accumulation: the DDP core's sync flag (NoSync while false).
  absl::Status SetSync(bool sync) override {
    ddp_->set_sync(sync);
    return absl::OkStatus();
  }
  double LastExposedCommSeconds() override { return last_synced_ ? ddp_->last_finalize_seconds() : 0; }
  uint64_t BytesSent() override;

  TorchDdp& ddp() { return *ddp_; }

 private:
  TorchDdpStepper(TorchModule& module, std::unique_ptr<TorchDdp> ddp, Communicator& comm)
      : module_(module), ddp_(std::move(ddp)), comm_(comm) {}
  TorchModule& module_;
  std::unique_ptr<TorchDdp> ddp_;
  Communicator& comm_;
  bool last_synced_ = false;
};

}  // namespace interop
}  // namespace lockstep

#endif  // LOCKSTEP_INTEROP_TORCH_TRAINERS_TORCH_DDP_STEPPER_H_
