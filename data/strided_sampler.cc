#include "data/strided_sampler.h"

#include <algorithm>

namespace lockstep {

StridedSampler::StridedSampler(int64_t n, int rank, int world_size)
    : n_(std::max<int64_t>(n, 0)), rank_(rank), world_size_(std::max(world_size, 1)) {}

int64_t StridedSampler::size() const { return rank_ >= n_ ? 0 : (n_ - rank_ + world_size_ - 1) / world_size_; }

std::vector<int64_t> StridedSampler::Indices() const {
  std::vector<int64_t> out;
  out.reserve(size());
  for (int64_t i = rank_; i < n_; i += world_size_) out.push_back(i);
  return out;
}

}  // namespace lockstep
