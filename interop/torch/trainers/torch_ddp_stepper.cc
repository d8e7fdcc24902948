#include "interop/torch/trainers/torch_ddp_stepper.h"

#include "core/status.h"
#include "trainers/ddp_stepper.h"

namespace lockstep {
namespace interop {

absl::StatusOr<std::unique_ptr<TorchDdpStepper>> TorchDdpStepper::Create(TorchModule& module, Communicator& comm,
                                                                         const DdpOptions& options) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TorchDdp> ddp, TorchDdp::Create(module.torch_module(), comm, options));
  return std::unique_ptr<TorchDdpStepper>(new TorchDdpStepper(module, std::move(ddp), comm));
}

absl::StatusOr<Tensor> TorchDdpStepper::Forward(const Tensor& input) {
  LOCKSTEP_RETURN_IF_ERROR(ddp_->BeforeForward());
  return module_.Forward(input);
}

absl::Status TorchDdpStepper::Backward(const Tensor& grad_output) {
  last_synced_ = ddp_->sync();
  // The data needs no gradient; the buckets are reduced inside backward.
  return module_.Backward(grad_output, /*input_grad=*/false).status();
}

uint64_t TorchDdpStepper::BytesSent() {
  uint64_t sent = 0;
  for (uint64_t b : comm_.Traffic().bytes_sent) sent += b;
  return sent;
}

void TorchDdpStepper::AttachTrace(TraceRecorder* trace) { ddp_->SetBucketObserver(BucketTraceObserver(trace)); }

}  // namespace interop
}  // namespace lockstep
