// ModelStepper: how one batch goes forward and backward, the seam between
// the training loop (train_loop.h) and data parallelism. The loop computes
// the loss, scales its gradient and steps the optimizer; a stepper only runs
// the model, so one process (LocalStepper), DDP (DdpStepper, ddp_stepper.h)
// and libtorch's DDP (interop/torch/trainers) share one loop.
//
//   LocalStepper stepper(*model);  // or DdpStepper (ddp_stepper.h)
//   LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, stepper.Forward(input));
//   LOCKSTEP_RETURN_IF_ERROR(stepper.Backward(grad_logits));  // gradients final
//   parts.stepper = &stepper;  // RunTraining drives it (train_loop.h)
#ifndef LOCKSTEP_TRAINERS_MODEL_STEPPER_H_
#define LOCKSTEP_TRAINERS_MODEL_STEPPER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "nn/clip_grad.h"
#include "nn/module.h"
#include "trainers/trace.h"

namespace lockstep {

class ModelStepper {
 public:
  virtual ~ModelStepper() = default;
  // The plain model: the optimizer's parameters, checkpoints, evaluation.
  virtual Module& module() = 0;
  // Training forward of one batch (DDP: after broadcasting buffers).
  virtual absl::StatusOr<Tensor> Forward(const Tensor& input) = 0;
  // Backward of the last Forward. On return every gradient is final (DDP:
  // the average over ranks).
  virtual absl::Status Backward(const Tensor& grad_output) = 0;
  // Called once before the first step with the rank's trace (null: no trace),
  // so that a stepper can record its own events (DDP: bucket all-reduces).
  virtual void AttachTrace(TraceRecorder* trace) {}
  // With uneven shards: before an epoch's first batch and after this rank's
  // last one. DdpStepper runs the epoch under a Join (ddp/join.h), EndShard
  // shadowing the other ranks' remaining steps; one process has nothing to do.
  virtual absl::Status BeginShard() { return absl::OkStatus(); }
  virtual absl::Status EndShard() { return absl::OkStatus(); }
  // After each optimizer step (and GradScaler update); `steps_before` is the
  // number of steps done before this one, resumed ones included. DdpStepper
  // runs its model averager here (post-local SGD).
  virtual absl::Status AfterStep(int64_t steps_before) { return absl::OkStatus(); }
  // Gradient accumulation (train_loop.h): before each micro-batch's Forward,
  // whether its Backward is the group's last, which synchronizes; false:
  // gradients accumulate locally without communication (DdpStepper: DDP's
  // NoSync for that forward and backward). One process and DataParallel
  // accumulate either way.
  virtual absl::Status SetSync(bool sync) { return absl::OkStatus(); }
  // After Backward: the seconds of it spent waiting for the gradients'
  // reductions once the local backward had finished (the communication it
  // did not hide); 0 without communication or after an unsynchronized one.
  virtual double LastExposedCommSeconds() { return 0; }
  // Payload bytes this rank has sent over the gradients' communicator so far
  // (Communicator::Traffic); 0 without one.
  virtual uint64_t BytesSent() { return 0; }
  // Clips the gradients of `parameters` (the optimizer's) to a global L2
  // norm and returns the norm before clipping: nn/clip_grad.h's ClipGradNorm;
  // FsdpStepper's takes the norm over every rank's shards (collective).
  virtual absl::StatusOr<double> ClipGradNorm(const std::vector<Parameter*>& parameters, double max_norm) {
    return lockstep::ClipGradNorm(parameters, max_norm);
  }
  // Whether module() holds the model's parameters between steps. FSDP's does
  // not: every rank calls SummonModule before the loop evaluates, saves or
  // restores through module() (collective: the parameters become whole
  // tensors) and ReleaseModule after it (`write_back`: a restore changed
  // them, and they go into the shards first). Elsewhere both do nothing.
  virtual absl::Status SummonModule() { return absl::OkStatus(); }
  virtual absl::Status ReleaseModule(bool write_back) { return absl::OkStatus(); }
};

// One process: the module itself.
class LocalStepper : public ModelStepper {
 public:
  explicit LocalStepper(Module& module) : module_(module) {}
  Module& module() override { return module_; }
  absl::StatusOr<Tensor> Forward(const Tensor& input) override { return module_.Forward(input); }
  absl::Status Backward(const Tensor& grad_output) override {
    // The first layer's input needs no gradient (the data).
    return module_.Backward(grad_output, /*input_grad=*/false).status();
  }

 private:
  Module& module_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_TRAINERS_MODEL_STEPPER_H_
