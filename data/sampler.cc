#include "data/sampler.h"

#include <numeric>

#include "data/randperm.h"

namespace lockstep {

std::vector<int64_t> SequentialSampler::Indices() const {
  std::vector<int64_t> out(static_cast<size_t>(size_));
  std::iota(out.begin(), out.end(), int64_t{0});
  return out;
}

std::vector<int64_t> RandomSampler::Indices() const {
  // Wrapping addition, as Python's seed + epoch followed by the uint64 cast.
  const uint64_t seed = static_cast<uint64_t>(seed_) + static_cast<uint64_t>(epoch_);
  absl::StatusOr<std::vector<int64_t>> perm = TorchRandperm(size_, seed);
  if (!perm.ok()) return SequentialSampler(size_).Indices();  // Unreachable below the limit.
  return *std::move(perm);
}

}  // namespace lockstep
