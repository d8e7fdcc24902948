// BucketTiming: one DDP bucket's reduction, for traces (the Reducer reports
// it to DistributedDataParallel::SetBucketObserver's observer).
#ifndef LOCKSTEP_DDP_BUCKET_TIMING_H_
#define LOCKSTEP_DDP_BUCKET_TIMING_H_

#include <chrono>
#include <cstddef>

namespace lockstep {

// Launched when its last gradient was ready, completed when its result was
// written back.
struct BucketTiming {
  size_t bucket_index;
  size_t bytes;
  std::chrono::steady_clock::time_point launched;
  std::chrono::steady_clock::time_point completed;
};

}  // namespace lockstep

#endif  // LOCKSTEP_DDP_BUCKET_TIMING_H_
