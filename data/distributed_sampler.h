// DistributedSampler: each of `num_replicas` ranks reads a disjoint,
// equally sized share of the dataset, exactly as
// torch.utils.data.DistributedSampler does (PyTorch 1.13), shuffled or not.
//
//   DistributedSamplerOptions options;
//   options.num_replicas = world_size;
//   options.rank = rank;
//   LOCKSTEP_ASSIGN_OR_RETURN(DistributedSampler sampler,
//                             DistributedSampler::Create(dataset.size(), options));
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     sampler.SetEpoch(epoch);   // else every epoch has the same order
//     for (int64_t i : sampler.Indices()) ...
//   }
//
// The numbers, as in PyTorch:
//   * num_samples = ceil((N - R) / R) if drop_last and N % R != 0, else
//     ceil(N / R); total_size = num_samples * R.
//   * Order: torch.randperm(N) with a generator seeded with seed + epoch (only
//     the low 32 bits matter, negative seeds wrap), or 0..N-1 unshuffled.
//   * Without drop_last the list is padded to total_size by repeating its
//     start (as often as needed when N < R); with drop_last it is cut.
//   * Rank r takes every R-th index starting at r.
//   * uneven (lockstep's, for Join: ddp/join.h): no padding and no cut, so
//     rank r takes the indices r, r + R, ... below N of the same order and
//     the shares differ by at most one; size() is then this rank's share.
// An empty dataset, num_replicas <= 0 and a rank outside [0, num_replicas)
// are errors (PyTorch silently yields nothing for the first).
#ifndef LOCKSTEP_DATA_DISTRIBUTED_SAMPLER_H_
#define LOCKSTEP_DATA_DISTRIBUTED_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "data/sampler.h"

namespace lockstep {

struct DistributedSamplerOptions {
  int64_t num_replicas = 1;
  int64_t rank = 0;
  bool shuffle = true;
  int64_t seed = 0;
  bool drop_last = false;
  bool uneven = false;  // See above; not with drop_last.
};

class DistributedSampler : public Sampler {
 public:
  static absl::StatusOr<DistributedSampler> Create(int64_t dataset_size, const DistributedSamplerOptions& options);

  // Indices per rank (PyTorch's num_samples, len(sampler)).
  int64_t size() const override { return num_samples_; }
  // The padded (or cut) length over all ranks; with `uneven`, the dataset's size.
  int64_t total_size() const { return options_.uneven ? dataset_size_ : num_samples_ * options_.num_replicas; }
  const DistributedSamplerOptions& options() const { return options_; }

  void SetEpoch(int64_t epoch) override { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  std::vector<int64_t> Indices() const override;

 private:
  DistributedSampler(int64_t dataset_size, const DistributedSamplerOptions& options, int64_t num_samples)
      : dataset_size_(dataset_size), options_(options), num_samples_(num_samples) {}

  int64_t dataset_size_;
  DistributedSamplerOptions options_;
  int64_t num_samples_;
  int64_t epoch_ = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_DATA_DISTRIBUTED_SAMPLER_H_
