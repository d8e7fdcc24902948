#include "ddp/reducer.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/kernels.h"
#include "core/status.h"
#include "ddp/bucket_assignment.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<Reducer>> Reducer::Create(std::unique_ptr<GradSlots> params,
                                                         std::vector<std::string> names, Communicator& comm,
                                                         ReducerOptions options) {
  if (params == nullptr || params->size() == 0) {
    return absl::InvalidArgumentError(
        "DistributedDataParallel: the module has no parameters; there is nothing to average (use the module "
        "directly)");
  }
  if (options.bucket_cap_bytes == 0 || options.first_bucket_bytes == 0) {
    return absl::InvalidArgumentError("DistributedDataParallel: bucket_cap_mb and first_bucket_bytes must be positive");
  }
  std::unique_ptr<Reducer> reducer(new Reducer(std::move(params), std::move(names), comm, options));
  // The first buckets (distributed.py's _ddp_init_helper): one bucket per
  // dtype/device when the graph is static or has no unused parameters (it
  // is rebuilt after the first iteration in the order gradients came);
  // otherwise [1 MiB, cap] over the parameters in registration order, the
  // list reversed since gradients come roughly in reverse.
  std::vector<BucketItem> items;
  for (size_t i = 0; i < reducer->params_->size(); ++i) {
    const Tensor& v = reducer->params_->value(i);
    items.push_back({v.nbytes(), v.dtype(), v.device()});
  }
  std::vector<size_t> limits;
  if (options.static_graph || !options.find_unused_parameters) {
    limits = {std::numeric_limits<size_t>::max()};
  } else {
    limits = {options.first_bucket_bytes, options.bucket_cap_bytes};
  }
  LOCKSTEP_ASSIGN_OR_RETURN(BucketAssignment assignment, AssignBuckets(items, limits));
  std::reverse(assignment.buckets.begin(), assignment.buckets.end());
  LOCKSTEP_RETURN_IF_ERROR(reducer->InitializeBuckets(assignment.buckets));
  return reducer;
}

Reducer::Reducer(std::unique_ptr<GradSlots> params, std::vector<std::string> names, Communicator& comm,
                 ReducerOptions options)
    : params_(std::move(params)),
      names_(std::move(names)),
      comm_(comm),
      options_(options),
      locations_(params_->size()),
      ready_(params_->size(), false),
      locally_used_(params_->size(), false) {}

absl::Status Reducer::InitializeBuckets(const std::vector<std::vector<size_t>>& buckets) {
  std::vector<Bucket> fresh;
  std::vector<bool> seen(params_->size(), false);
  for (size_t b = 0; b < buckets.size(); ++b) {
    std::vector<Tensor> members;
    for (size_t index : buckets[b]) {
      if (index >= params_->size() || seen[index]) {
        return absl::InternalError(absl::StrCat("DistributedDataParallel: bad bucket assignment (parameter ", index,
                                                " placed twice or out of range)"));
      }
      seen[index] = true;
      members.push_back(params_->value(index));
    }
    LOCKSTEP_ASSIGN_OR_RETURN(GradBucket grad_bucket,
                              GradBucket::Create(b, b + 1 == buckets.size(), members, buckets[b]));
    fresh.push_back(Bucket{std::move(grad_bucket), buckets[b], buckets[b].size(), nullptr});
  }
  for (size_t i = 0; i < params_->size(); ++i) {
    if (!seen[i]) return absl::InternalError(absl::StrCat("DistributedDataParallel: parameter ", i, " has no bucket"));
  }
  buckets_ = std::move(fresh);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (size_t m = 0; m < buckets_[b].params.size(); ++m) locations_[buckets_[b].params[m]] = Location{b, m};
  }
  return absl::OkStatus();
}

absl::Status Reducer::SetCommHook(std::unique_ptr<CommHook> hook) {
  if (iteration_ > 0) {
    return absl::FailedPreconditionError(
        "DistributedDataParallel::RegisterCommHook: register the hook before the first backward (as PyTorch)");
  }
  hook_ = std::move(hook);
  return absl::OkStatus();
}

std::vector<std::vector<size_t>> Reducer::bucket_indices() const {
  std::vector<std::vector<size_t>> out;
  for (const Bucket& b : buckets_) out.push_back(b.params);
  return out;
}

absl::Status Reducer::CheckPreviousIterationFinished() const {
  if (unreduced_.empty()) return absl::OkStatus();
  std::vector<std::string> indices;
  for (const std::string& name : unreduced_) {
    const size_t i = static_cast<size_t>(std::find(names_.begin(), names_.end(), name) - names_.begin());
    indices.push_back(absl::StrCat(i));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "Expected to have finished reduction in the prior iteration before starting a new one. This error "
      "indicates that your module has parameters that were not used in producing loss. You can enable unused "
      "parameter detection by setting DdpOptions::find_unused_parameters = true (PyTorch's "
      "find_unused_parameters=True), and by making sure all forward outputs participate in calculating loss. "
      "Parameters which did not receive grad for rank ",
      comm_.rank(), ": ", absl::StrJoin(unreduced_, ", "), "\nParameter indices which did not receive grad for rank ",
      comm_.rank(), ": ", absl::StrJoin(indices, " ")));
}

void Reducer::PrepareForBackward() {
  std::fill(ready_.begin(), ready_.end(), false);
  std::fill(locally_used_.begin(), locally_used_.end(), false);
  for (Bucket& b : buckets_) {
    b.pending = b.params.size();
    b.work = nullptr;
  }
  next_bucket_ = 0;
  expect_hooks_ = true;
}

absl::Status Reducer::MarkReady(size_t index) {
  if (!expect_hooks_) return absl::OkStatus();  // NoSync, or no backward of ours.
  if (index >= params_->size()) {
    return absl::InternalError(
        absl::StrCat("DistributedDataParallel: gradient-ready hook for parameter ", index, " of ", params_->size()));
  }
  if (ready_[index]) {
    return absl::FailedPreconditionError(
        absl::StrCat("Expected to mark a variable ready only once. Parameter ", names_[index], " (index ", index,
                     ") got its gradient twice in one backward on rank ", comm_.rank(),
                     ". A parameter may take part in one backward only once: do not share it between layers or run "
                     "several backwards per forward"));
  }
  ready_[index] = true;
  locally_used_[index] = true;
  const bool rebuilding = !has_rebuilt_buckets_ && (options_.static_graph || !options_.find_unused_parameters);
  if (rebuilding && iteration_ == 0) ready_order_.push_back(index);
  LOCKSTEP_RETURN_IF_ERROR(CopyGradIntoBucket(index));
  Bucket& bucket = buckets_[locations_[index].bucket];
  if (--bucket.pending == 0) LaunchReadyBuckets();
  return absl::OkStatus();
}

absl::Status Reducer::CopyGradIntoBucket(size_t index) {
  LOCKSTEP_ASSIGN_OR_RETURN(const Tensor grad, params_->grad(index));
  const Location loc = locations_[index];
  const Tensor& view = buckets_[loc.bucket].grad_bucket.views()[loc.member];
  if (!grad.defined()) return view.SetZero();  // Unused here: contributes zeros.
  const int world = divide_factor_ > 0 ? divide_factor_ : comm_.size();
  if (grad.raw_data() == view.raw_data()) {
    // gradient_as_bucket_view: the gradient already is the bucket's view.
    return hook_ == nullptr ? Divide(view, world) : absl::OkStatus();
  }
  // Without a comm hook the copy is multiplied by 1/world_size (PyTorch's
  // mul_out(bucket_view, grad, 1 / div_factor)); a hook divides itself.
  if (hook_ == nullptr && world > 1 && view.dtype() == DType::kF32 && grad.dtype() == DType::kF32 &&
      !view.device().is_cuda() && !grad.device().is_cuda() && view.numel() == grad.numel()) {
    // One pass instead of a copy and a scale: the gradient is read once and
    // the bucket written once. Same rounding as Scale's (x * float(factor)).
    const float factor = static_cast<float>(1.0 / world);
    // __restrict: without it the loop is not vectorized.
    const float* __restrict src = grad.data<float>();
    float* __restrict dst = view.data<float>();
    for (int64_t i = 0, n = view.numel(); i < n; ++i) dst[i] = src[i] * factor;
  } else {
    LOCKSTEP_RETURN_IF_ERROR(view.CopyFrom(grad));
    if (hook_ == nullptr && world > 1) LOCKSTEP_RETURN_IF_ERROR(Scale(view, 1.0 / world));
  }
  if (options_.gradient_as_bucket_view) {
    const GradBucket& bucket = buckets_[loc.bucket].grad_bucket;
    return params_->set_grad_view(index, bucket.buffer(), bucket.offsets()[loc.member], view);
  }
  return absl::OkStatus();
}

void Reducer::LaunchReadyBuckets() {
  // In bucket order on every rank, so that all ranks issue the same
  // collectives in the same order.
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& bucket = buckets_[next_bucket_];
    const auto launched = std::chrono::steady_clock::now();
    std::shared_ptr<Work> work = hook_ != nullptr ? hook_->Run(comm_, bucket.grad_bucket)
                                                  : comm_.AllReduce(bucket.grad_bucket.buffer(), ReduceOp::kSum);
    if (observer_) {
      const size_t index = next_bucket_;
      const size_t bytes = bucket.grad_bucket.buffer().nbytes();
      auto observer = observer_;
      work = work->Then([observer, index, bytes, launched] {
        observer(BucketTiming{index, bytes, launched, std::chrono::steady_clock::now()});
        return absl::OkStatus();
      });
    }
    bucket.work = std::move(work);
    ++next_bucket_;
  }
}

absl::Status Reducer::ReduceUsedMap(std::vector<bool>* globally_used) {
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor used, Tensor::Empty({static_cast<int64_t>(params_->size())}, DType::kI32));
  int32_t* u = used.data<int32_t>();
  for (size_t i = 0; i < params_->size(); ++i) u[i] = locally_used_[i] ? 1 : 0;
  LOCKSTEP_RETURN_IF_ERROR(comm_.AllReduce(used, ReduceOp::kSum)->Wait());
  globally_used->assign(params_->size(), false);
  for (size_t i = 0; i < params_->size(); ++i) (*globally_used)[i] = u[i] > 0;
  return absl::OkStatus();
}

absl::Status Reducer::FinalizeBackward() {
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = FinalizeBackwardImpl();
  last_finalize_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return status;
}

absl::Status Reducer::FinalizeBackwardImpl() {
  expect_hooks_ = false;
  divide_factor_ = 0;
  const bool detect_unused = options_.find_unused_parameters || options_.static_graph;
  if (detect_unused) {
    // Parameters whose hook never fired: ready now, contributing zeros.
    for (size_t i = 0; i < params_->size(); ++i) {
      if (ready_[i]) continue;
      expect_hooks_ = true;
      absl::Status s = MarkReady(i);
      locally_used_[i] = false;
      expect_hooks_ = false;
      LOCKSTEP_RETURN_IF_ERROR(s);
    }
  } else {
    std::vector<std::string> missing;
    for (size_t i = 0; i < params_->size(); ++i) {
      if (!ready_[i]) missing.push_back(names_[i]);
    }
    if (!missing.empty()) {
      // As PyTorch: this backward ends without reduction, and the next
      // forward raises. Launched buckets still finish first.
      unreduced_ = std::move(missing);
      for (Bucket& b : buckets_) {
        if (b.work != nullptr) (void)b.work->Wait();
      }
      return absl::OkStatus();
    }
  }
  std::vector<bool> globally_used(params_->size(), true);
  if (options_.find_unused_parameters || (options_.static_graph && iteration_ == 0)) {
    LOCKSTEP_RETURN_IF_ERROR(ReduceUsedMap(&globally_used));
    if (options_.static_graph) static_used_ = globally_used;
  } else if (options_.static_graph) {
    globally_used = static_used_;
  }
  absl::Status first_error;
  for (Bucket& b : buckets_) {
    // A CUDA bucket: the legacy default stream, where the copies below and
    // the optimizer run, waits for its all-reduce on the device; the host
    // does not (DDP's finalize_backward with NCCL). A failure then surfaces
    // at the group's next operation. Elsewhere this is Wait().
    absl::Status s = b.grad_bucket.device().is_cuda() ? b.work->SynchronizeStream(nullptr) : b.work->Wait();
    if (!s.ok() && first_error.ok()) first_error = s;
  }
  LOCKSTEP_RETURN_IF_ERROR(first_error);
  for (Bucket& b : buckets_) {
    for (size_t m = 0; m < b.params.size(); ++m) {
      const size_t i = b.params[m];
      if (!globally_used[i]) continue;  // Used nowhere: its gradient stays untouched.
      const Tensor& view = b.grad_bucket.views()[m];
      LOCKSTEP_ASSIGN_OR_RETURN(const Tensor grad, params_->grad(i));
      if (options_.gradient_as_bucket_view) {
        LOCKSTEP_RETURN_IF_ERROR(params_->set_grad_view(i, b.grad_bucket.buffer(), b.grad_bucket.offsets()[m], view));
      } else if (!grad.defined()) {
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor copy, view.Clone());
        LOCKSTEP_RETURN_IF_ERROR(params_->set_grad(i, copy));
      } else {
        LOCKSTEP_RETURN_IF_ERROR(grad.CopyFrom(view));
      }
    }
  }
  ++iteration_;
  return absl::OkStatus();
}

absl::Status Reducer::RebuildBucketsIfNeeded() {
  const bool should = !has_rebuilt_buckets_ && (options_.static_graph || !options_.find_unused_parameters);
  // As reducer.cpp's rebuild_buckets: once a backward (or Join's shadow of
  // one) has recorded the ready order.
  if (!should || ready_order_.empty() || (iteration_ == 0 && ready_order_.size() != params_->size())) {
    return absl::OkStatus();
  }
  has_rebuilt_buckets_ = true;
  // Every rank computes the assignment from its own ready order, then all
  // take rank 0's (reducer.cpp's sync_bucket_indices).
  std::vector<BucketItem> items;
  std::vector<int64_t> order;
  for (size_t i : ready_order_) {
    const Tensor& v = params_->value(i);
    items.push_back({v.nbytes(), v.dtype(), v.device()});
    order.push_back(static_cast<int64_t>(i));
  }
  ready_order_.clear();
  zero_buckets_.clear();
  if (order.size() != params_->size()) {
    return absl::InternalError(absl::StrCat("DistributedDataParallel: ", order.size(), " of ", params_->size(),
                                            " gradients were recorded in the first iteration"));
  }
  const size_t limits[] = {options_.first_bucket_bytes, options_.bucket_cap_bytes};
  LOCKSTEP_ASSIGN_OR_RETURN(BucketAssignment assignment, AssignBuckets(items, limits, order));
  // Wire form: [number of buckets, size of each, indices...]; its length is
  // the same on every rank (1 + buckets + parameters), except the bucket
  // count, which is sent first.
  LOCKSTEP_ASSIGN_OR_RETURN(
      Tensor count, Tensor::FromVector<int64_t>(std::vector<int64_t>{static_cast<int64_t>(assignment.buckets.size())}));
  LOCKSTEP_RETURN_IF_ERROR(comm_.Broadcast(count, 0)->Wait());
  const int64_t n_buckets = count.data<int64_t>()[0];
  if (n_buckets < 1 || n_buckets > static_cast<int64_t>(params_->size())) {
    return absl::InternalError(absl::StrCat("DistributedDataParallel: rank 0 sent ", n_buckets, " buckets"));
  }
  std::vector<int64_t> wire(static_cast<size_t>(n_buckets) + params_->size(), 0);
  if (comm_.rank() == 0) {
    size_t k = 0;
    for (const auto& bucket : assignment.buckets) wire[k++] = static_cast<int64_t>(bucket.size());
    for (const auto& bucket : assignment.buckets) {
      for (size_t i : bucket) wire[k++] = static_cast<int64_t>(i);
    }
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor message, Tensor::FromVector<int64_t>(wire));
  LOCKSTEP_RETURN_IF_ERROR(comm_.Broadcast(message, 0)->Wait());
  const int64_t* w = message.data<int64_t>();
  std::vector<std::vector<size_t>> buckets(static_cast<size_t>(n_buckets));
  size_t k = static_cast<size_t>(n_buckets);
  for (int64_t b = 0; b < n_buckets; ++b) {
    if (w[b] < 1 || k + static_cast<size_t>(w[b]) > wire.size()) {
      return absl::InternalError("DistributedDataParallel: malformed bucket assignment from rank 0");
    }
    for (int64_t j = 0; j < w[b]; ++j) buckets[static_cast<size_t>(b)].push_back(static_cast<size_t>(w[k++]));
  }
  return InitializeBuckets(buckets);
}

absl::Status Reducer::ShadowBackward() {
  if (zero_buckets_.size() != buckets_.size()) {
    zero_buckets_.clear();
    for (size_t b = 0; b < buckets_.size(); ++b) {
      std::vector<Tensor> members;
      for (size_t index : buckets_[b].params) members.push_back(params_->value(index));
      LOCKSTEP_ASSIGN_OR_RETURN(GradBucket zeros,
                                GradBucket::Create(b, b + 1 == buckets_.size(), members, buckets_[b].params));
      zero_buckets_.push_back(std::move(zeros));
    }
  }
  std::vector<std::shared_ptr<Work>> works;
  for (GradBucket& zeros : zero_buckets_) {
    // A hook may have left its result in the buffer last time.
    LOCKSTEP_RETURN_IF_ERROR(zeros.buffer().SetZero());
    works.push_back(hook_ != nullptr ? hook_->Run(comm_, zeros) : comm_.AllReduce(zeros.buffer(), ReduceOp::kSum));
  }
  absl::Status first_error;
  if (options_.find_unused_parameters && !options_.static_graph) {
    std::vector<bool> ignored;
    first_error = ReduceUsedMap(&ignored);
  }
  for (const std::shared_ptr<Work>& w : works) {
    absl::Status s = w->Wait();
    if (!s.ok() && first_error.ok()) first_error = s;
  }
  LOCKSTEP_RETURN_IF_ERROR(first_error);
  const bool rebuilding = !has_rebuilt_buckets_ && (options_.static_graph || !options_.find_unused_parameters);
  if (rebuilding && ready_order_.empty()) {
    for (size_t i = 0; i < params_->size(); ++i) ready_order_.push_back(i);
  }
  return absl::OkStatus();
}

}  // namespace lockstep
