// Bucket assignment for fused all-reduce: which tensors share a flat buffer.
// A pure function (tensor sizes and kinds in, index lists out), testable
// without any communication, like c10d's compute_bucket_assignment_by_size.
//
//   std::vector<BucketItem> items = {{4000, DType::kF32, Device::Cpu()}, ...};
//   std::vector<std::vector<size_t>> buckets = AssignBuckets(items, 25 << 20);
//
// Rules:
//   * Tensors of different dtype or device never share a bucket; each
//     (dtype, device) has one open bucket at a time.
//   * Tensors join their open bucket in order; a bucket closes before a
//     tensor that would take it past `cap_bytes`, so no bucket exceeds the
//     cap, except that a tensor larger than the cap gets a bucket of its own.
//   * Buckets are listed by the smallest tensor index they hold, so the
//     first tensors' bucket comes first (and is all-reduced first).
#ifndef LOCKSTEP_COLLECTIVES_BUCKET_ASSIGNMENT_H_
#define LOCKSTEP_COLLECTIVES_BUCKET_ASSIGNMENT_H_

#include <cstddef>
#include <vector>

#include "absl/types/span.h"
#include "core/device.h"
#include "core/dtype.h"

namespace lockstep {

struct BucketItem {
  size_t bytes = 0;
  DType dtype = DType::kF32;
  Device device;
};

std::vector<std::vector<size_t>> AssignBuckets(absl::Span<const BucketItem> items, size_t cap_bytes);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_BUCKET_ASSIGNMENT_H_
