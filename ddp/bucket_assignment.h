// Bucket assignment for fused all-reduce: which tensors share a flat buffer.
// A pure function (tensor sizes and kinds in, index lists out), testable
// without any communication. It follows c10d's
// compute_bucket_assignment_by_size (torch/csrc/distributed/c10d/reducer.cpp,
// PyTorch 1.13) exactly, so lockstep's buckets match DDP's; the test checks
// that against golden data from PyTorch itself (testdata/bucket_golden.json).
//
//   std::vector<BucketItem> items = {{600 << 10, DType::kF32, Device::Cpu()}, ...};  // x3
//   LOCKSTEP_ASSIGN_OR_RETURN(BucketAssignment a,
//                             AssignBuckets(items, {kDefaultFirstBucketBytes, 25 << 20}));
//   // a.buckets == {{0, 1}, {2}}, a.size_limits == {1 << 20, 25 << 20}
//
// The rule:
//   * Tensors of different (dtype, device) never share a bucket. Each key has
//     one open bucket and its own position in `size_limits`, starting at the
//     first limit.
//   * Tensors are taken in order. A tensor is first ADDED to its key's open
//     bucket; then, if the bucket's bytes are >= the key's current limit, the
//     bucket closes and the key moves on to the next limit (staying at the
//     last one). So a bucket ends as soon as it reaches its limit and may go
//     past it by its last tensor: three 600 KiB tensors with limits
//     [1 MiB, 25 MiB] give {0, 1} (1200 KiB, closed at 1 MiB) and {2}. A
//     tensor alone at or over the limit is a bucket of its own.
//   * Buckets still open at the end are appended after the closed ones.
//   * Without `tensor_indices`, buckets are sorted by the smallest tensor
//     index they hold, so the first tensors' bucket comes first. DDP passes
//     [kDefaultFirstBucketBytes, bucket_cap] so that the bucket holding the
//     first parameters is small, then reverses the list, since gradients
//     become ready roughly in reverse order: the small bucket goes last and
//     the wait after the backward pass is short.
//   * With `tensor_indices` (Reducer::rebuild_buckets: tensors in the order
//     their gradients became ready, tensor_indices[i] the original index of
//     items[i]), buckets hold original indices and are NOT sorted: they stay
//     in ready order.
//   * `size_limits` of the result has, per bucket, the limit that was in
//     force for its key when it closed (or when its last tensor joined).
//
// Differences from c10d, all outside the rule:
//   * c10d appends the still-open buckets in the iteration order of an
//     unordered_map (hash dependent). Here they follow the order in which
//     they were opened. Without tensor_indices the sort makes this moot; with
//     tensor_indices and one key there is one open bucket; only with several
//     keys and tensor_indices can the order of those last buckets differ.
//   * c10d gives each sparse gradient a bucket of its own with limit 0;
//     lockstep has no sparse tensors.
//   * c10d asserts a non-empty tensor list; here no items give no buckets.
//   * Invalid arguments are errors (see AssignBuckets), not undefined.
#ifndef LOCKSTEP_DDP_BUCKET_ASSIGNMENT_H_
#define LOCKSTEP_DDP_BUCKET_ASSIGNMENT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/device.h"
#include "core/dtype.h"

namespace lockstep {

// The first limit DDP passes (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES):
// a small first bucket so that the last gradients are not stuck behind a
// full-size bucket. PyTorch found 1 MiB a good value.
inline constexpr size_t kDefaultFirstBucketBytes = size_t{1} << 20;

struct BucketItem {
  size_t bytes = 0;  // numel * element size
  DType dtype = DType::kF32;
  Device device;
};

struct BucketAssignment {
  // Tensor indices per bucket (original indices when tensor_indices is given).
  std::vector<std::vector<size_t>> buckets;
  // The size limit of each bucket, parallel to `buckets`.
  std::vector<size_t> size_limits;
};

// See the rule above. InvalidArgument for an empty `size_limits`, a zero
// limit, or `tensor_indices` that is not empty and not a permutation of
// 0..items.size()-1.
absl::StatusOr<BucketAssignment> AssignBuckets(absl::Span<const BucketItem> items, absl::Span<const size_t> size_limits,
                                               absl::Span<const int64_t> tensor_indices = {});

}  // namespace lockstep

#endif  // LOCKSTEP_DDP_BUCKET_ASSIGNMENT_H_
