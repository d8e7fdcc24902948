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
  // The reducer sees the parameters that require a gradient (PyTorch's
  // _build_params_for_reducer); frozen ones are broadcast above and left alone.
  std::vector<Parameter*> params;
  std::vector<std::string> reducer_names;
  ddp->reducer_index_.assign(named.size(), kNotReduced);
  for (size_t i = 0; i < named.size(); ++i) {
    if (!named[i].parameter->requires_grad) continue;
    ddp->reducer_index_[i] = params.size();
    ddp->module_index_.push_back(i);
    params.push_back(named[i].parameter);
    reducer_names.push_back(named[i].name);
  }
  if (params.empty()) {
    return absl::InvalidArgumentError(
        "DistributedDataParallel is not needed when a module doesn't have any parameter that requires a gradient.");
  }
  LOCKSTEP_ASSIGN_OR_RETURN(ddp->reducer_,
                            Reducer::Create(std::make_unique<ParameterSlotsOf<Parameter>>(std::move(params)),
                                            std::move(reducer_names), comm, reducer_options));
  Reducer* reducer = ddp->reducer_.get();
  const std::vector<size_t>* index = &ddp->reducer_index_;
  module.SetGradReadyHook([reducer, index](const GradReadyEvent& event) {
    const size_t i = event.index < index->size() ? (*index)[event.index] : kNotReduced;
    if (i == kNotReduced) {
      return absl::FailedPreconditionError(absl::StrCat(
          "DistributedDataParallel: parameter '", event.name,
          "' produced a gradient but was frozen (requires_grad false) when DDP was created, so it has no bucket; "
          "set requires_grad before wrapping the module"));
    }
    return reducer->MarkReady(i);
  });
  return ddp;
}

DistributedDataParallel::DistributedDataParallel(Module& module, Communicator& comm, DdpOptions options)
    : module_(module), comm_(comm), options_(options) {}

DistributedDataParallel::~DistributedDataParallel() { module_.SetGradReadyHook(nullptr); }

bool DistributedDataParallel::ShouldSyncBuffers() const {
  return require_forward_param_sync_ && options_.broadcast_buffers && has_buffers_;
}

absl::Status DistributedDataParallel::SyncBuffers(bool is_joined) {
  std::vector<Tensor> buffers;
  for (const NamedTensor& b : module_.NamedBuffers()) buffers.push_back(b.second);
  int src = 0;
  if (join_.enable) {
    // distributed.py's _find_common_rank(rank, not joined): the largest rank
    // that has not joined sends (an i64 MAX all-reduce).
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor rank,
                              Tensor::FromVector<int64_t>(std::vector<int64_t>{is_joined ? -1 : comm_.rank()}));
    LOCKSTEP_RETURN_IF_ERROR(comm_.AllReduce(rank, ReduceOp::kMax)->Wait());
    src = static_cast<int>(rank.data<int64_t>()[0]);
    if (src < 0) {
      return absl::InternalError("Join: every rank has joined, yet a buffer broadcast was started");
    }
  }
  return BroadcastCoalesced(comm_, buffers, src);
}

absl::StatusOr<Tensor> DistributedDataParallel::Forward(const Tensor& input) {
  LOCKSTEP_RETURN_IF_ERROR(failed_);
  LOCKSTEP_RETURN_IF_ERROR(reducer_->CheckPreviousIterationFinished());
  if (join_.enable) {
    // Join.notify_join_context: this rank has not joined (a one, summed
    // over the ranks that have not; the joined ones send zeros).
    LOCKSTEP_ASSIGN_OR_RETURN(join_count_, Tensor::FromVector<float>(std::vector<float>{1.0f}));
    join_count_work_ = comm_.AllReduce(join_count_, ReduceOp::kSum);
    if (join_.throw_on_early_termination) {
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor joined, Tensor::Zeros({1}, DType::kF32));
      LOCKSTEP_RETURN_IF_ERROR(comm_.AllReduce(joined, ReduceOp::kSum)->Wait());
      if (joined.data<float>()[0] != 0.0f) {
        return absl::FailedPreconditionError(
            absl::StrCat("Detected at least one rank that exhausted inputs. Throwing across all ranks. (rank ",
                         comm_.rank(), "; Join with throw_on_early_termination)"));
      }
    }
  }
  // Also under NoSync, as PyTorch (torch.is_grad_enabled() alone gates it).
  LOCKSTEP_RETURN_IF_ERROR(reducer_->RebuildBucketsIfNeeded());
  if (ShouldSyncBuffers()) LOCKSTEP_RETURN_IF_ERROR(SyncBuffers(/*is_joined=*/false));
  if (join_.enable) {
    // _check_global_requires_backward_grad_sync: tells the joined ranks
    // whether to shadow a backward (not awaited here).
    LOCKSTEP_ASSIGN_OR_RETURN(join_sync_, Tensor::FromVector<float>(std::vector<float>{sync_ ? 1.0f : 0.0f}));
    join_sync_work_ = comm_.AllReduce(join_sync_, ReduceOp::kSum);
  }
  absl::StatusOr<Tensor> out = module_.Forward(input);
  require_forward_param_sync_ = sync_;
  return out;
}

absl::Status DistributedDataParallel::Backward(const Tensor& grad_output) {
  if (!sync_) return module_.Backward(grad_output, /*input_grad=*/false).status();
  reducer_->PrepareForBackward();
  if (join_count_work_ != nullptr && !join_.divide_by_initial_world_size) {
    // Divide by the ranks that have not joined (reducer.cpp's
    // set_divide_factor from the forward's work).
    LOCKSTEP_RETURN_IF_ERROR(join_count_work_->Wait());
    reducer_->SetDivideFactor(static_cast<int>(join_count_.data<float>()[0]));
  }
  LOCKSTEP_RETURN_IF_ERROR(module_.Backward(grad_output, /*input_grad=*/false).status());
  absl::Status finalized = reducer_->FinalizeBackward();
  if (!finalized.ok() && options_.fault_tolerant) {
    for (Parameter* p : module_.Parameters()) {
      if (p->grad.defined()) (void)p->grad.SetZero();
    }
    failed_ = absl::Status(finalized.code(),
                           absl::StrCat("DistributedDataParallel (fault_tolerant): rank ", comm_.rank(),
                                        ": the gradients' reduction failed and they were zeroed (", finalized.message(),
                                        "); re-form the group and build a new DDP over it"));
    return failed_;
  }
  return finalized;
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

double DistributedDataParallel::last_finalize_seconds() const { return reducer_->last_finalize_seconds(); }

std::vector<std::vector<size_t>> DistributedDataParallel::bucket_indices() const {
  std::vector<std::vector<size_t>> buckets = reducer_->bucket_indices();
  for (std::vector<size_t>& bucket : buckets) {
    for (size_t& i : bucket) i = module_index_[i];
  }
  return buckets;
}

void DistributedDataParallel::SetBucketObserver(std::function<void(const BucketTiming&)> observer) {
  reducer_->SetObserver(std::move(observer));
}

}  // namespace lockstep
