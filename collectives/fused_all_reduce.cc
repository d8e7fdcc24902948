#include "collectives/fused_all_reduce.h"

#include "absl/strings/str_cat.h"
#include "collectives/bucket_assignment.h"
#include "core/status.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<FusedAllReduce>> FusedAllReduce::Start(Communicator& comm, std::vector<Tensor> tensors,
                                                                       ReduceOp op, size_t bucket_cap_bytes) {
  std::vector<BucketItem> items;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined()) {
      return absl::InvalidArgumentError(absl::StrCat("FusedAllReduce: tensor ", i, " is undefined"));
    }
    items.push_back({tensors[i].nbytes(), tensors[i].dtype(), tensors[i].device()});
  }
  std::unique_ptr<FusedAllReduce> fused(new FusedAllReduce());
  fused->tensors_ = std::move(tensors);
  fused->buckets_ = AssignBuckets(items, bucket_cap_bytes);
  for (const std::vector<size_t>& bucket : fused->buckets_) {
    const Tensor& first = fused->tensors_[bucket.front()];
    int64_t count = 0;
    for (size_t i : bucket) count += fused->tensors_[i].numel();
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor flat, Tensor::Empty({count}, first.dtype(), first.device()));
    int64_t offset = 0;
    for (size_t i : bucket) {
      const Tensor& t = fused->tensors_[i];
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor slot, flat.Flat(offset, t.numel()));
      LOCKSTEP_RETURN_IF_ERROR(slot.CopyFrom(t));
      offset += t.numel();
    }
    // Launched as soon as this bucket is packed; the next one packs meanwhile.
    fused->works_.push_back(comm.AllReduce(flat, op));
    fused->flat_.push_back(std::move(flat));
  }
  return fused;
}

absl::Status FusedAllReduce::Wait() {
  if (waited_) return absl::FailedPreconditionError("FusedAllReduce::Wait: called twice");
  waited_ = true;
  absl::Status first_error;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    absl::Status s = works_[b]->Wait();
    if (!s.ok()) {
      if (first_error.ok()) first_error = s;
      continue;  // Tensors of a failed bucket keep their inputs.
    }
    int64_t offset = 0;
    for (size_t i : buckets_[b]) {
      const Tensor& t = tensors_[i];
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor slot, flat_[b].Flat(offset, t.numel()));
      LOCKSTEP_RETURN_IF_ERROR(t.CopyFrom(slot));
      offset += t.numel();
    }
  }
  return first_error;
}

}  // namespace lockstep
