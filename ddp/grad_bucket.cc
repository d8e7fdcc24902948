#include "ddp/grad_bucket.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace lockstep {
namespace {

// The same code, with which bucket and member failed in front.
absl::Status WithContext(const absl::Status& status, const char* operation, size_t bucket, size_t member) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(operation, "(bucket ", bucket, ", member ", member, "): ", status.message()));
}

}  // namespace

absl::StatusOr<GradBucket> GradBucket::Create(size_t index, bool is_last, const std::vector<Tensor>& members,
                                              const std::vector<size_t>& indices) {
  const std::string where = absl::StrCat("GradBucket::Create(bucket ", index, "): ");
  if (members.empty()) return absl::InvalidArgumentError(where + "no member tensors; a bucket needs at least one");
  if (indices.size() != members.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, indices.size(), " indices for ", members.size(), " members; pass one index per member"));
  }
  for (size_t i = 0; i < members.size(); ++i) {
    if (!members[i].defined()) {
      return absl::InvalidArgumentError(absl::StrCat(where, "member ", i, " (tensor ", indices[i], ") is undefined"));
    }
  }
  const Tensor& first = members.front();
  for (size_t i = 1; i < members.size(); ++i) {
    const Tensor& t = members[i];
    if (t.dtype() != first.dtype() || t.device() != first.device()) {
      return absl::InvalidArgumentError(absl::StrCat(where, "member ", i, " (tensor ", indices[i], ") is ",
                                                     t.DebugString(), " but member 0 (tensor ", indices[0], ") is ",
                                                     first.DebugString(), "; a bucket holds one dtype on one device"));
    }
  }

  GradBucket bucket;
  bucket.index_ = index;
  bucket.is_last_ = is_last;
  bucket.members_ = members;
  bucket.indices_ = indices;
  int64_t total = 0;
  for (const Tensor& t : members) {
    bucket.offsets_.push_back(total);
    bucket.lengths_.push_back(t.numel());
    total += t.numel();
  }
  LOCKSTEP_ASSIGN_OR_RETURN(bucket.buffer_, Tensor::Empty({total}, first.dtype(), first.device()));
  // Zeroed so that a member never copied in (an unused parameter's gradient)
  // contributes zeros, as in c10d.
  LOCKSTEP_RETURN_IF_ERROR(bucket.buffer_.SetZero());
  for (size_t i = 0; i < members.size(); ++i) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor flat, bucket.buffer_.Flat(bucket.offsets_[i], bucket.lengths_[i]));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor view, flat.Reshape(members[i].shape()));
    bucket.views_.push_back(std::move(view));
  }
  return bucket;
}

absl::Status GradBucket::CheckMember(size_t i, const char* operation) const {
  if (i < members_.size()) return absl::OkStatus();
  return absl::OutOfRangeError(
      absl::StrCat(operation, "(bucket ", index_, "): member ", i, " does not exist; the bucket has ", size()));
}

absl::Status GradBucket::CopyIn(size_t i, const Tensor& src) const {
  LOCKSTEP_RETURN_IF_ERROR(CheckMember(i, "GradBucket::CopyIn"));
  return WithContext(views_[i].CopyFrom(src), "GradBucket::CopyIn", index_, i);
}

absl::Status GradBucket::CopyOut(size_t i, const Tensor& dst) const {
  LOCKSTEP_RETURN_IF_ERROR(CheckMember(i, "GradBucket::CopyOut"));
  return WithContext(dst.CopyFrom(views_[i]), "GradBucket::CopyOut", index_, i);
}

absl::Status GradBucket::CopyInAll() const {
  for (size_t i = 0; i < members_.size(); ++i) LOCKSTEP_RETURN_IF_ERROR(CopyIn(i, members_[i]));
  return absl::OkStatus();
}

absl::Status GradBucket::CopyOutAll() const {
  for (size_t i = 0; i < members_.size(); ++i) LOCKSTEP_RETURN_IF_ERROR(CopyOut(i, members_[i]));
  return absl::OkStatus();
}

}  // namespace lockstep
