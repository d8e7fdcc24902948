#include "interop/torch/trainers/torch_fsdp_stepper.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "fsdp/clip_grad.h"
#include "interop/torch/bridge/tensor_bridge.h"

namespace lockstep {
namespace interop {

absl::StatusOr<std::unique_ptr<TorchFsdpStepper>> TorchFsdpStepper::Create(TorchModule& module, Communicator& comm,
                                                                           TorchFullyShardOptions options) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TorchFsdp> core,
                            TorchFsdp::Create(module.torch_module(), comm, std::move(options)));
  std::unique_ptr<TorchFsdpStepper> stepper(new TorchFsdpStepper(module, std::move(core)));
  // TorchModule gave every parameter a zero gradient of its full size; FSDP
  // keeps none between steps, and the bridge must let go of the memory the
  // parameters had before they moved into the flat buffers.
  try {
    for (at::Tensor p : module.torch_module().parameters(/*recurse=*/true)) p.mutable_grad() = at::Tensor();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("TorchFsdpStepper::Create: libtorch raised: ", e.what()));
  }
  LOCKSTEP_RETURN_IF_ERROR(module.RefreshParameters());
  for (const at::Tensor& shard : stepper->core_->shard_parameters()) {
    Parameter& p = stepper->shards_.emplace_back();
    LOCKSTEP_ASSIGN_OR_RETURN(p.value, FromTorch(shard));
  }
  return stepper;
}

absl::StatusOr<Tensor> TorchFsdpStepper::Forward(const Tensor& input) {
  LOCKSTEP_RETURN_IF_ERROR(core_->BeforeForward());
  absl::StatusOr<Tensor> out = module_.Forward(input);
  if (!out.ok()) return core_->ForwardFailed(out.status());
  core_->AfterForward();
  return out;
}

absl::Status TorchFsdpStepper::Backward(const Tensor& grad_output) {
  std::vector<at::Tensor> torch_shards = core_->shard_parameters();
  // A gradient the loop's optimizer set to none is none for FSDP too, so the
  // reduction sets it instead of adding to the last step's.
  for (size_t u = 0; u < shards_.size(); ++u) {
    if (!shards_[u].grad.defined()) torch_shards[u].mutable_grad() = at::Tensor();
  }
  absl::Status status = module_.Backward(grad_output, /*input_grad=*/false).status();
  for (size_t u = 0; u < shards_.size(); ++u) {
    const at::Tensor& g = torch_shards[u].grad();
    if (g.defined()) {
      LOCKSTEP_ASSIGN_OR_RETURN(shards_[u].grad, FromTorch(g));
    } else {
      shards_[u].grad = Tensor();
    }
  }
  return status;
}

absl::Status TorchFsdpStepper::SetSync(bool sync) {
  core_->set_sync(sync);
  return absl::OkStatus();
}

uint64_t TorchFsdpStepper::BytesSent() {
  uint64_t sent = 0;
  for (uint64_t b : core_->comm().Traffic().bytes_sent) sent += b;
  return sent;
}

absl::StatusOr<double> TorchFsdpStepper::ClipGradNorm(const std::vector<Parameter*>& parameters, double max_norm) {
  // `parameters` are the ShardedOptimizer's: this view's shards.
  return ClipShardedGradNorm(*this, max_norm);
}

absl::Status TorchFsdpStepper::SummonModule() {
  LOCKSTEP_RETURN_IF_ERROR(core_->SummonFullParameters());
  return module_.RefreshParameters();
}

absl::Status TorchFsdpStepper::ReleaseModule(bool write_back) {
  absl::Status released = core_->ReleaseFullParameters(write_back);
  absl::Status refreshed = module_.RefreshParameters();
  return released.ok() ? refreshed : released;
}

std::vector<NamedParameter> TorchFsdpStepper::ShardParameters() {
  std::vector<NamedParameter> out;
  const std::vector<std::string> paths = core_->unit_paths();
  for (size_t u = 0; u < shards_.size(); ++u) {
    out.push_back({paths[u].empty() ? "flat_param" : paths[u] + ".flat_param", &shards_[u]});
  }
  return out;
}

}  // namespace interop
}  // namespace lockstep
