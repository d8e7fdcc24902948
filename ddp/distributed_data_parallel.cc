#include "ddp/distributed_data_parallel.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/dtype.h"
#include "core/status.h"
#include "ddp/ddp_options.h"
#include "ddp/grad_slots.h"
#include "ddp/reducer.h"
#include "ddp/replica_sync.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<DistributedDataParallel>> DistributedDataParallel::Create(Module& module,
                                                                                         Communicator& comm,
                                                                                         DdpOptions options) {
  LOCKSTEP_ASSIGN_OR_RETURN(const ReducerOptions reducer_options, ToReducerOptions(options));
  std::vector<NamedParameter> named = module.NamedParameters();
  std::vector<Tensor> state;
  std::vector<std::string> names;
  for (const NamedParameter& p : named) {
    state.push_back(p.parameter->value);
    names.push_back(p.name);
  }
  LOCKSTEP_RETURN_IF_ERROR(VerifyShapesAcrossRanks(comm, state, names));
  std::vector<NamedTensor> buffers = module.NamedBuffers();
  for (const NamedTensor& b : buffers) state.push_back(b.second);
  LOCKSTEP_RETURN_IF_ERROR(BroadcastFromRankZero(comm, state));

  std::unique_ptr<DistributedDataParallel> ddp(new DistributedDataParallel(module, comm, options));
  ddp->has_buffers_ = !buffers.empty();
  std::vector<Parameter*> params;
  for (const NamedParameter& p : named) params.push_back(p.parameter);
  LOCKSTEP_ASSIGN_OR_RETURN(ddp->reducer_,
                            Reducer::Create(std::make_unique<ParameterSlotsOf<Parameter>>(std::move(params)),
                                            std::move(names), comm, reducer_options));
  Reducer* reducer = ddp->reducer_.get();
  module.SetGradReadyHook([reducer](const GradReadyEvent& event) { return reducer->MarkReady(event.index); });
  return ddp;
}

DistributedDataParallel::DistributedDataParallel(Module& module, Communicator& comm, DdpOptions options)
    : module_(module), comm_(comm), options_(options) {}

DistributedDataParallel::~DistributedDataParallel() { module_.SetGradReadyHook(nullptr); }

absl::StatusOr<Tensor> DistributedDataParallel::Forward(const Tensor& input) {
  LOCKSTEP_RETURN_IF_ERROR(reducer_->CheckPreviousIterationFinished());
  if (sync_) LOCKSTEP_RETURN_IF_ERROR(reducer_->RebuildBucketsIfNeeded());
  if (options_.broadcast_buffers && has_buffers_) {
    std::vector<Tensor> buffers;
    for (const NamedTensor& b : module_.NamedBuffers()) buffers.push_back(b.second);
    LOCKSTEP_RETURN_IF_ERROR(BroadcastFromRankZero(comm_, buffers));
  }
  return module_.Forward(input);
}

absl::Status DistributedDataParallel::Backward(const Tensor& grad_output) {
  if (!sync_) return module_.Backward(grad_output, /*input_grad=*/false).status();
  reducer_->PrepareForBackward();
  LOCKSTEP_RETURN_IF_ERROR(module_.Backward(grad_output, /*input_grad=*/false).status());
  return reducer_->FinalizeBackward();
}

absl::Status DistributedDataParallel::RegisterCommHook(std::unique_ptr<CommHook> hook) {
  return reducer_->SetCommHook(std::move(hook));
}

DistributedDataParallel::NoSyncScope DistributedDataParallel::NoSync() {
  sync_ = false;
  return NoSyncScope(this);
}

DistributedDataParallel::NoSyncScope::~NoSyncScope() {
  if (ddp_ != nullptr) ddp_->sync_ = true;
}

std::vector<std::vector<size_t>> DistributedDataParallel::bucket_indices() const {
  return reducer_->bucket_indices();
}

void DistributedDataParallel::SetBucketObserver(std::function<void(const BucketTiming&)> observer) {
  reducer_->SetObserver(std::move(observer));
}

}  // namespace lockstep
