#include "collectives/bucket_assignment.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace lockstep {

std::vector<std::vector<size_t>> AssignBuckets(absl::Span<const BucketItem> items, size_t cap_bytes) {
  using Key = std::tuple<int, int, int>;  // dtype, device type, device index
  struct Open {
    std::vector<size_t> indices;
    size_t bytes = 0;
  };
  std::map<Key, Open> open;
  std::vector<std::vector<size_t>> buckets;
  for (size_t i = 0; i < items.size(); ++i) {
    const BucketItem& item = items[i];
    const Key key{static_cast<int>(item.dtype), static_cast<int>(item.device.type()), item.device.index()};
    Open& bucket = open[key];
    if (!bucket.indices.empty() && bucket.bytes + item.bytes > cap_bytes) {
      buckets.push_back(std::move(bucket.indices));
      bucket = Open();
    }
    bucket.indices.push_back(i);
    bucket.bytes += item.bytes;
  }
  for (auto& [key, bucket] : open) {
    if (!bucket.indices.empty()) buckets.push_back(std::move(bucket.indices));
  }
  std::sort(buckets.begin(), buckets.end(),
            [](const std::vector<size_t>& a, const std::vector<size_t>& b) { return a.front() < b.front(); });
  return buckets;
}

}  // namespace lockstep
