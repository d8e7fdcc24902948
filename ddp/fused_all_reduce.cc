#include "ddp/fused_all_reduce.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "ddp/bucket_assignment.h"

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
  const size_t limits[] = {bucket_cap_bytes};
  LOCKSTEP_ASSIGN_OR_RETURN(BucketAssignment assignment, AssignBuckets(items, limits));
  std::unique_ptr<FusedAllReduce> fused(new FusedAllReduce());
  fused->buckets_ = std::move(assignment.buckets);
  for (size_t b = 0; b < fused->buckets_.size(); ++b) {
    std::vector<Tensor> members;
    for (size_t i : fused->buckets_[b]) members.push_back(tensors[i]);
    LOCKSTEP_ASSIGN_OR_RETURN(GradBucket bucket,
                              GradBucket::Create(b, b + 1 == fused->buckets_.size(), members, fused->buckets_[b]));
    LOCKSTEP_RETURN_IF_ERROR(bucket.CopyInAll());
    // Launched as soon as this bucket is packed; the next one packs meanwhile.
    fused->works_.push_back(comm.AllReduce(bucket.buffer(), op));
    fused->grad_buckets_.push_back(std::move(bucket));
  }
  return fused;
}

absl::Status FusedAllReduce::Wait() {
  if (waited_) return absl::FailedPreconditionError("FusedAllReduce::Wait: called twice");
  waited_ = true;
  absl::Status first_error;
  for (size_t b = 0; b < grad_buckets_.size(); ++b) {
    absl::Status s = works_[b]->Wait();
    if (!s.ok()) {
      if (first_error.ok()) first_error = s;
      continue;  // Tensors of a failed bucket keep their inputs.
    }
    LOCKSTEP_RETURN_IF_ERROR(grad_buckets_[b].CopyOutAll());
  }
  return first_error;
}

}  // namespace lockstep
