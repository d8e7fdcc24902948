// LatenessHistogram: how late packets left, in nanoseconds, in fixed memory.
//
// Log-linear buckets (HdrHistogram's layout with 64 sub-buckets): values
// below 64 ns are exact; above, each power of two is split into 64 equal
// buckets, so a quantile is within 1/64 (1.6%) above the true value. The
// maximum is kept exactly. Recording is a few instructions and allocates
// nothing.
//
//   LatenessHistogram h;
//   h.Record(write_ns - deadline_ns);
//   double p99_us = h.Quantile(0.99) / 1e3;
#ifndef LOCKSTEP_TOOLS_SCALE_LAB_LATENESS_HISTOGRAM_H_
#define LOCKSTEP_TOOLS_SCALE_LAB_LATENESS_HISTOGRAM_H_

#include <array>
#include <cstdint>

namespace lockstep {
namespace scale_lab {

class LatenessHistogram {
 public:
  // Negative values (never expected: a packet does not leave before its
  // deadline) count as 0.
  void Record(int64_t ns);

  int64_t count() const { return count_; }
  int64_t max_ns() const { return max_ns_; }
  // The smallest bucket bound b with at least q * count() values <= b
  // (capped at max_ns()); 0 when empty. q in [0, 1].
  int64_t Quantile(double q) const;

 private:
  static constexpr int kSubBits = 6;
  static constexpr int kSub = 1 << kSubBits;
  // Exponents 6..62 above the exact range.
  static constexpr int kBuckets = kSub + (63 - kSubBits) * kSub;

  static int BucketOf(uint64_t v);
  static int64_t UpperBound(int bucket);

  std::array<int64_t, kBuckets> counts_{};
  int64_t count_ = 0;
  int64_t max_ns_ = 0;
};

}  // namespace scale_lab
}  // namespace lockstep

#endif  // LOCKSTEP_TOOLS_SCALE_LAB_LATENESS_HISTOGRAM_H_
