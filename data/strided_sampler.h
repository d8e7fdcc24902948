// StridedSampler: rank `rank`'s share of a dataset of `n` examples when every
// example must be visited exactly once over all ranks (evaluation): rank,
// rank + W, rank + 2W, ... below n, for W = world_size.
//
//   StridedSampler shard(/*n=*/10, /*rank=*/1, /*world_size=*/3);
//   std::vector<int64_t> mine = shard.Indices();  // 1, 4, 7
//
// Unlike DistributedSampler (data/distributed_sampler.h) it neither pads nor
// shuffles: padding would count some examples twice in a summed metric, so
// the shares differ in size by at most one (and are empty for ranks >= n).
// Like every sampler here it takes rank and world size as numbers; the
// caller sums the ranks' results however it likes.
#ifndef LOCKSTEP_DATA_STRIDED_SAMPLER_H_
#define LOCKSTEP_DATA_STRIDED_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "data/sampler.h"

namespace lockstep {

// The shares of all ranks are disjoint and cover [0, n). A negative n counts
// as 0 and a world size below 1 as 1.
class StridedSampler : public Sampler {
 public:
  StridedSampler(int64_t n, int rank, int world_size);
  int64_t size() const override;
  std::vector<int64_t> Indices() const override;

 private:
  int64_t n_;
  int rank_, world_size_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_DATA_STRIDED_SAMPLER_H_
