#include "tools/scale_lab/lateness_histogram.h"

#include <algorithm>
#include <cmath>

namespace lockstep {
namespace scale_lab {

int LatenessHistogram::BucketOf(uint64_t v) {
  if (v < static_cast<uint64_t>(kSub)) return static_cast<int>(v);
  int exponent = 63 - __builtin_clzll(v);  // >= kSubBits
  int sub = static_cast<int>((v >> (exponent - kSubBits)) & (kSub - 1));
  return kSub + (exponent - kSubBits) * kSub + sub;
}

int64_t LatenessHistogram::UpperBound(int bucket) {
  if (bucket < kSub) return bucket;
  int exponent = (bucket - kSub) / kSub + kSubBits;
  int sub = (bucket - kSub) % kSub;
  uint64_t width = uint64_t{1} << (exponent - kSubBits);
  uint64_t low = (uint64_t{1} << exponent) + sub * width;
  return static_cast<int64_t>(low + width - 1);
}

void LatenessHistogram::Record(int64_t ns) {
  if (ns < 0) ns = 0;
  ++counts_[BucketOf(static_cast<uint64_t>(ns))];
  ++count_;
  max_ns_ = std::max(max_ns_, ns);
}

int64_t LatenessHistogram::Quantile(double q) const {
  if (count_ == 0) return 0;
  q = std::min(1.0, std::max(0.0, q));
  int64_t rank = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(q * count_)));
  int64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += counts_[b];
    if (seen >= rank) return std::min(UpperBound(b), max_ns_);
  }
  return max_ns_;
}

}  // namespace scale_lab
}  // namespace lockstep
