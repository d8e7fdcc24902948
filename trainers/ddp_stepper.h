// DdpStepper: the training loop's ModelStepper over DistributedDataParallel
// (ddp/distributed_data_parallel.h). Forward and Backward are DDP's; with a
// trace attached, every bucket's all-reduce becomes an event from launch to
// completion on the trace's communication row.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<DdpStepper> stepper,
//                             DdpStepper::Create(*model, *group.comm, ddp_options, std::move(hook)));
//   parts.stepper = stepper.get();
//   parts.comm = group.comm.get();
#ifndef LOCKSTEP_TRAINERS_DDP_STEPPER_H_
#define LOCKSTEP_TRAINERS_DDP_STEPPER_H_

#include <functional>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "ddp/bucket_timing.h"
#include "ddp/comm_hook.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/join.h"
#include "ddp/local_sgd.h"
#include "nn/module.h"
#include "trainers/model_stepper.h"
#include "trainers/trace.h"

namespace lockstep {

// The observer that puts each bucket's reduction on `trace`'s communication
// row as "allreduce bucket <i>" (bucket index and bytes as arguments); any
// DDP front end with bucket timings uses it.
std::function<void(const BucketTiming&)> BucketTraceObserver(TraceRecorder* trace);

class DdpStepper : public ModelStepper {
 public:
  // `module` and `comm` must outlive the stepper; `hook` may be null (the
  // default all-reduce).
  static absl::StatusOr<std::unique_ptr<DdpStepper>> Create(Module& module, Communicator& comm,
                                                            const DdpOptions& options, std::unique_ptr<CommHook> hook);

  Module& module() override { return ddp_->module(); }
  absl::StatusOr<Tensor> Forward(const Tensor& input) override { return ddp_->Forward(input); }
  void AttachTrace(TraceRecorder* trace) override;
  // Uneven shards: the epoch runs under a Join (PyTorch's defaults:
  // gradients divided by the world size, no early termination).
  absl::Status BeginShard() override;
  absl::Status EndShard() override;
  // Post-local SGD's model averaging after each step (null: none).
  void SetAverager(std::unique_ptr<PeriodicModelAverager> averager) { averager_ = std::move(averager); }
  absl::Status AfterStep(int64_t steps_before) override;
  // Accumulation: DDP's NoSync while sync is false.
  absl::Status SetSync(bool sync) override;
  double LastExposedCommSeconds() override { return last_synced_ ? ddp_->last_finalize_seconds() : 0; }
  uint64_t BytesSent() override;
  absl::Status Backward(const Tensor& grad_output) override {
    last_synced_ = ddp_->sync();
    return ddp_->Backward(grad_output);
  }

  DistributedDataParallel& ddp() { return *ddp_; }
  // Steps the last EndShard shadowed for ranks with more batches.
  int64_t shadowed_steps() const { return shadowed_; }

 private:
  DdpStepper(std::unique_ptr<DistributedDataParallel> ddp, Communicator& comm) : ddp_(std::move(ddp)), comm_(comm) {}
  std::unique_ptr<DistributedDataParallel> ddp_;
  Communicator& comm_;
  std::optional<DistributedDataParallel::NoSyncScope> no_sync_;
  bool last_synced_ = false;
  std::unique_ptr<Join> join_;
  std::unique_ptr<PeriodicModelAverager> averager_;
  int64_t shadowed_ = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_TRAINERS_DDP_STEPPER_H_
