#include "ddp/distributed_data_parallel.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/dtype.h"
#include "core/status.h"
#include "ddp/reducer.h"

namespace lockstep {
namespace {

// This rank's parameter list as numbers: count, then per parameter dtype,
// rank and dims. Compared across ranks before anything is broadcast.
std::vector<int64_t> Describe(const std::vector<NamedParameter>& params) {
  std::vector<int64_t> d = {static_cast<int64_t>(params.size())};
  for (const NamedParameter& p : params) {
    d.push_back(static_cast<int64_t>(p.parameter->value.dtype()));
    d.push_back(static_cast<int64_t>(p.parameter->value.shape().size()));
    for (int64_t dim : p.parameter->value.shape()) d.push_back(dim);
  }
  return d;
}

std::string ShapeText(const std::vector<int64_t>& d, size_t* pos) {
  const DType dtype = static_cast<DType>(d[(*pos)++]);
  const int64_t ndim = d[(*pos)++];
  std::vector<int64_t> dims(d.begin() + static_cast<std::ptrdiff_t>(*pos),
                            d.begin() + static_cast<std::ptrdiff_t>(*pos + static_cast<size_t>(ndim)));
  *pos += static_cast<size_t>(ndim);
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "] ", DTypeName(dtype));
}

// An error naming the first difference between rank `a`'s and rank `b`'s
// descriptions, or OK.
absl::Status Compare(const std::vector<int64_t>& mine, int me, const std::vector<int64_t>& theirs, int them,
                     const std::vector<NamedParameter>& params) {
  if (mine == theirs) return absl::OkStatus();
  if (mine[0] != theirs[0]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DistributedDataParallel: rank ", me, " has ", mine[0], " parameters but rank ", them, " has ", theirs[0],
        ". DDP expects the same model on every rank: build it the same way everywhere"));
  }
  size_t pm = 1, pt = 1;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string a = ShapeText(mine, &pm);
    const std::string b = ShapeText(theirs, &pt);
    if (a != b) {
      return absl::InvalidArgumentError(absl::StrCat(
          "DistributedDataParallel: parameter ", i, " (", params[i].name, ") is ", a, " on rank ", me, " but ", b,
          " on rank ", them, ". DDP expects the same model on every rank: build it the same way everywhere"));
    }
  }
  return absl::InternalError("DistributedDataParallel: parameter descriptions differ");
}

absl::Status VerifyShapesAcrossRanks(Communicator& comm, const std::vector<NamedParameter>& params) {
  const std::vector<int64_t> mine = Describe(params);
  // Lengths first (they differ when the models do), then the padded lists.
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor length, Tensor::FromVector<int64_t>({static_cast<int64_t>(mine.size())}));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor lengths, Tensor::Empty({comm.size()}, DType::kI64));
  LOCKSTEP_RETURN_IF_ERROR(comm.AllGather(length, lengths)->Wait());
  int64_t longest = 0;
  for (int r = 0; r < comm.size(); ++r) longest = std::max(longest, lengths.data<int64_t>()[r]);
  std::vector<int64_t> padded = mine;
  padded.resize(static_cast<size_t>(longest), -1);
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor local, Tensor::FromVector<int64_t>(padded));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor all, Tensor::Empty({longest * comm.size()}, DType::kI64));
  LOCKSTEP_RETURN_IF_ERROR(comm.AllGather(local, all)->Wait());
  // Every rank compares every other with itself, so all ranks fail together
  // (naming the first rank that differs from this one).
  for (int r = 0; r < comm.size(); ++r) {
    if (r == comm.rank()) continue;
    const int64_t* p = all.data<int64_t>() + r * longest;
    std::vector<int64_t> theirs(p, p + lengths.data<int64_t>()[r]);
    LOCKSTEP_RETURN_IF_ERROR(Compare(mine, comm.rank(), theirs, r, params));
  }
  return absl::OkStatus();
}

// Broadcasts every tensor from rank 0 (PyTorch's _sync_module_states).
absl::Status BroadcastFromRankZero(Communicator& comm, const std::vector<Tensor>& tensors) {
  std::vector<std::shared_ptr<Work>> works;
  for (const Tensor& t : tensors) works.push_back(comm.Broadcast(t, 0));
  absl::Status first;
  for (auto& w : works) {
    absl::Status s = w->Wait();
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DistributedDataParallel>> DistributedDataParallel::Create(Module& module,
                                                                                         Communicator& comm,
                                                                                         DdpOptions options) {
  if (!(options.bucket_cap_mb > 0) || !std::isfinite(options.bucket_cap_mb)) {
    return absl::InvalidArgumentError(absl::StrCat("DistributedDataParallel: bucket_cap_mb is ",
                                                   options.bucket_cap_mb, "; it must be a positive number (MiB)"));
  }
  std::vector<NamedParameter> named = module.NamedParameters();
  LOCKSTEP_RETURN_IF_ERROR(VerifyShapesAcrossRanks(comm, named));
  std::vector<Tensor> state;
  for (const NamedParameter& p : named) state.push_back(p.parameter->value);
  std::vector<NamedTensor> buffers = module.NamedBuffers();
  for (const NamedTensor& b : buffers) state.push_back(b.second);
  LOCKSTEP_RETURN_IF_ERROR(BroadcastFromRankZero(comm, state));

  std::unique_ptr<DistributedDataParallel> ddp(new DistributedDataParallel(module, comm, options));
  ddp->has_buffers_ = !buffers.empty();
  std::vector<Parameter*> params;
  std::vector<std::string> names;
  for (const NamedParameter& p : named) {
    params.push_back(p.parameter);
    names.push_back(p.name);
  }
  ReducerOptions reducer_options;
  // PyTorch: bucket_bytes_cap = int(bucket_cap_mb * 1024 * 1024).
  reducer_options.bucket_cap_bytes = static_cast<size_t>(options.bucket_cap_mb * 1024 * 1024);
  if (reducer_options.bucket_cap_bytes == 0) reducer_options.bucket_cap_bytes = 1;
  reducer_options.first_bucket_bytes = options.first_bucket_bytes;
  reducer_options.find_unused_parameters = options.find_unused_parameters;
  reducer_options.gradient_as_bucket_view = options.gradient_as_bucket_view;
  reducer_options.static_graph = options.static_graph;
  LOCKSTEP_ASSIGN_OR_RETURN(ddp->reducer_, Reducer::Create(std::move(params), std::move(names), comm,
                                                           reducer_options));
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
