#include "trainers/ddp_stepper.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<DdpStepper>> DdpStepper::Create(Module& module, Communicator& comm,
                                                               const DdpOptions& options,
                                                               std::unique_ptr<CommHook> hook) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<DistributedDataParallel> ddp,
                            DistributedDataParallel::Create(module, comm, options));
  if (hook != nullptr) LOCKSTEP_RETURN_IF_ERROR(ddp->RegisterCommHook(std::move(hook)));
  return std::unique_ptr<DdpStepper>(new DdpStepper(std::move(ddp), comm));
}

absl::Status DdpStepper::BeginShard() {
  LOCKSTEP_ASSIGN_OR_RETURN(join_, Join::Create(*ddp_));
  return absl::OkStatus();
}

absl::Status DdpStepper::EndShard() {
  if (join_ == nullptr) return absl::FailedPreconditionError("DdpStepper::EndShard without BeginShard");
  std::unique_ptr<Join> join = std::move(join_);
  LOCKSTEP_RETURN_IF_ERROR(join->Finish());
  shadowed_ = join->shadowed_iterations();
  return absl::OkStatus();
}

absl::Status DdpStepper::AfterStep(int64_t steps_before) {
  if (averager_ == nullptr) return absl::OkStatus();
  // The step counter follows the loop's (so a resumed run averages at the
  // same steps).
  averager_->set_step(steps_before);
  return averager_->AverageParameters(module().Parameters());
}

absl::Status DdpStepper::SetSync(bool sync) {
  if (sync) {
    no_sync_.reset();
  } else if (!no_sync_) {
    no_sync_.emplace(ddp_->NoSync());
  }
  return absl::OkStatus();
}

uint64_t DdpStepper::BytesSent() {
  uint64_t sent = 0;
  for (uint64_t b : comm_.Traffic().bytes_sent) sent += b;
  return sent;
}

std::function<void(const BucketTiming&)> BucketTraceObserver(TraceRecorder* trace) {
  if (trace == nullptr) return nullptr;
  // Runs on the thread that completed the bucket; the recorder is thread-safe.
  return [trace](const BucketTiming& t) {
    trace->Complete(absl::StrCat("allreduce bucket ", t.bucket_index), "ddp", t.launched, t.completed,
                    TraceRecorder::kCommThread,
                    {{"bucket", static_cast<int64_t>(t.bucket_index)}, {"bytes", static_cast<int64_t>(t.bytes)}});
  };
}

void DdpStepper::AttachTrace(TraceRecorder* trace) { ddp_->SetBucketObserver(BucketTraceObserver(trace)); }

}  // namespace lockstep
