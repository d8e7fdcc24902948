// GradBucket: one flat buffer that holds several tensors of one dtype and
// device back to back, so that one collective moves them all (DDP's
// gradient buckets, Horovod's fusion buffer). Mirrors c10d's GradBucket
// (torch/csrc/distributed/c10d/comm.hpp): index(), buffer(), views() (c10d's
// getGradients), members() (its getParameters, here whatever tensors the
// bucket was made for) and is_last(). Which tensors share a bucket is
// decided elsewhere (ddp/bucket_assignment.h).
//
//   LOCKSTEP_ASSIGN_OR_RETURN(BucketAssignment a, AssignBuckets(items, limits));
//   std::vector<Tensor> members = ...;  // grads[i] for i in a.buckets[b]
//   LOCKSTEP_ASSIGN_OR_RETURN(GradBucket bucket,
//       GradBucket::Create(b, b + 1 == a.buckets.size(), members, a.buckets[b]));
//   LOCKSTEP_RETURN_IF_ERROR(bucket.CopyInAll());          // pack
//   LOCKSTEP_RETURN_IF_ERROR(comm.AllReduce(bucket.buffer(), ReduceOp::kAvg)->Wait());
//   LOCKSTEP_RETURN_IF_ERROR(bucket.CopyOutAll());         // unpack
//
// Layout: member i occupies elements [offset(i), offset(i) + length(i)) of
// the 1-D buffer, in the order given, without padding. view(i) is that range
// with member i's shape; it shares storage with the buffer, so writing either
// writes both (a gradient may be computed straight into its view and skip
// CopyIn, as DDP's gradient_as_bucket_view does). The buffer is allocated
// once, zeroed, in Create and reused for every step.
//
// Copying a GradBucket copies tensor handles, like Tensor: the copy shares
// the buffer and the members. Methods that write data are const, as in Tensor.
#ifndef LOCKSTEP_DDP_GRAD_BUCKET_H_
#define LOCKSTEP_DDP_GRAD_BUCKET_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace lockstep {

class GradBucket {
 public:
  // A bucket for `members` (at least one, all defined, one dtype and device;
  // an error names the first tensor that differs from members[0]).
  // `indices[i]` is member i's index in the caller's tensor list (e.g. the
  // parameter index); `index` is the bucket's position among all buckets and
  // `is_last` says that it is the last one reduced in an iteration.
  static absl::StatusOr<GradBucket> Create(size_t index, bool is_last, const std::vector<Tensor>& members,
                                           const std::vector<size_t>& indices);

  size_t index() const { return index_; }
  bool is_last() const { return is_last_; }
  // The flat 1-D buffer: pass it to the collective.
  const Tensor& buffer() const { return buffer_; }
  DType dtype() const { return buffer_.dtype(); }
  Device device() const { return buffer_.device(); }

  // Number of members.
  size_t size() const { return members_.size(); }
  const std::vector<Tensor>& members() const { return members_; }
  // Original index of each member (`indices` of Create).
  const std::vector<size_t>& indices() const { return indices_; }
  // Per member, its first element in the buffer and its number of elements.
  const std::vector<int64_t>& offsets() const { return offsets_; }
  const std::vector<int64_t>& lengths() const { return lengths_; }
  // Per member, its range of the buffer with its shape (aliases the buffer).
  const std::vector<Tensor>& views() const { return views_; }

  // Copies `src` (member i's number of elements and dtype, any shape or
  // device) into member i's range of the buffer.
  absl::Status CopyIn(size_t i, const Tensor& src) const;
  // Copies member i's range of the buffer into `dst`.
  absl::Status CopyOut(size_t i, const Tensor& dst) const;
  // CopyIn(i, members()[i]) for every member: packs the bucket.
  absl::Status CopyInAll() const;
  // CopyOut(i, members()[i]) for every member: unpacks the bucket.
  absl::Status CopyOutAll() const;

 private:
  GradBucket() = default;
  absl::Status CheckMember(size_t i, const char* operation) const;

  size_t index_ = 0;
  bool is_last_ = false;
  Tensor buffer_;
  std::vector<Tensor> members_;
  std::vector<size_t> indices_;
  std::vector<int64_t> offsets_;
  std::vector<int64_t> lengths_;
  std::vector<Tensor> views_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_DDP_GRAD_BUCKET_H_
