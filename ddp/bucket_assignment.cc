#include "ddp/bucket_assignment.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

absl::Status CheckArguments(size_t count, absl::Span<const size_t> size_limits,
                            absl::Span<const int64_t> tensor_indices) {
  if (size_limits.empty()) {
    return absl::InvalidArgumentError("AssignBuckets: size_limits is empty; pass at least one limit in bytes");
  }
  for (size_t k = 0; k < size_limits.size(); ++k) {
    if (size_limits[k] == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("AssignBuckets: size_limits[", k, "] is 0; limits must be positive"));
    }
  }
  if (tensor_indices.empty()) return absl::OkStatus();
  if (tensor_indices.size() != count) {
    return absl::InvalidArgumentError(absl::StrCat("AssignBuckets: ", tensor_indices.size(), " tensor_indices for ",
                                                   count, " items; pass one per item or none"));
  }
  // c10d does not check; a duplicate here would put one tensor in two buckets.
  std::vector<bool> seen(count, false);
  for (size_t i = 0; i < count; ++i) {
    const int64_t index = tensor_indices[i];
    if (index < 0 || static_cast<uint64_t>(index) >= count || seen[index]) {
      return absl::InvalidArgumentError(absl::StrCat("AssignBuckets: tensor_indices[", i, "] = ", index,
                                                     " is out of range or repeated; expected a permutation of 0..",
                                                     count - 1));
    }
    seen[index] = true;
  }
  return absl::OkStatus();
}

struct Bucket {
  std::vector<size_t> indices;
  size_t size_limit = 0;
};

}  // namespace

absl::StatusOr<BucketAssignment> AssignBuckets(absl::Span<const BucketItem> items, absl::Span<const size_t> size_limits,
                                               absl::Span<const int64_t> tensor_indices) {
  absl::Status valid = CheckArguments(items.size(), size_limits, tensor_indices);
  if (!valid.ok()) return valid;

  using Key = std::tuple<int, int, int>;  // dtype, device type, device index
  struct Open {
    Bucket bucket;
    size_t bytes = 0;
    size_t limit = 0;      // position in size_limits, per key
    size_t opened_at = 0;  // position in items of the bucket's first tensor
  };
  std::map<Key, Open> open;
  std::vector<Bucket> result;
  for (size_t i = 0; i < items.size(); ++i) {
    const BucketItem& item = items[i];
    const size_t index = tensor_indices.empty() ? i : static_cast<size_t>(tensor_indices[i]);
    Open& o = open[Key{static_cast<int>(item.dtype), static_cast<int>(item.device.type()), item.device.index()}];
    if (o.bucket.indices.empty()) o.opened_at = i;
    // Add first, then close once the limit is reached: c10d's order.
    o.bucket.indices.push_back(index);
    o.bytes += item.bytes;
    o.bucket.size_limit = size_limits[o.limit];
    if (o.bytes >= o.bucket.size_limit) {
      result.push_back(std::move(o.bucket));
      o.bucket = Bucket();
      o.bytes = 0;
      if (o.limit + 1 < size_limits.size()) ++o.limit;
    }
  }

  // Leftovers in the order they were opened (c10d: unordered_map order).
  std::vector<Open*> leftovers;
  for (auto& [key, o] : open) {
    if (!o.bucket.indices.empty()) leftovers.push_back(&o);
  }
  std::sort(leftovers.begin(), leftovers.end(),
            [](const Open* a, const Open* b) { return a->opened_at < b->opened_at; });
  for (Open* o : leftovers) result.push_back(std::move(o->bucket));

  // Without tensor_indices the items are in parameter order: list buckets by
  // their first parameter. With them, the order is gradient-ready order: keep it.
  if (tensor_indices.empty()) {
    // Bucket contents ascend here, so front() is the minimum.
    std::sort(result.begin(), result.end(),
              [](const Bucket& a, const Bucket& b) { return a.indices.front() < b.indices.front(); });
  }

  BucketAssignment assignment;
  assignment.buckets.reserve(result.size());
  assignment.size_limits.reserve(result.size());
  for (Bucket& b : result) {
    assignment.buckets.push_back(std::move(b.indices));
    assignment.size_limits.push_back(b.size_limit);
  }
  return assignment;
}

}  // namespace lockstep
