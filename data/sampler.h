// Samplers decide which dataset indices an epoch visits, and in what order.
//
//   SequentialSampler seq(n);             // 0, 1, ..., n-1
//   RandomSampler rnd(n, /*seed=*/7);     // a permutation, new each epoch
//   rnd.SetEpoch(3);
//   std::vector<int64_t> order = rnd.Indices();
//
// The DataLoader calls SetEpoch(epoch) then Indices() at the start of each
// epoch. DistributedSampler (data/distributed_sampler.h) is the one DDP uses.
// Implementations are immutable apart from SetEpoch; Indices() is const and
// deterministic for a given epoch.
#ifndef LOCKSTEP_DATA_SAMPLER_H_
#define LOCKSTEP_DATA_SAMPLER_H_

#include <cstdint>
#include <vector>

namespace lockstep {

class Sampler {
 public:
  virtual ~Sampler() = default;

  // Number of indices Indices() returns.
  virtual int64_t size() const = 0;

  // Selects the epoch (the shuffling seed for random samplers).
  virtual void SetEpoch(int64_t epoch) {}

  virtual std::vector<int64_t> Indices() const = 0;
};

class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t dataset_size) : size_(dataset_size < 0 ? 0 : dataset_size) {}
  int64_t size() const override { return size_; }
  std::vector<int64_t> Indices() const override;

 private:
  int64_t size_;
};

// A permutation of [0, n) drawn like torch.randperm with seed + epoch (so
// reproducible across runs, unlike PyTorch's RandomSampler, which seeds from
// the global generator). n must be below kMaxTorchRandpermSize.
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t dataset_size, int64_t seed) : size_(dataset_size < 0 ? 0 : dataset_size), seed_(seed) {}
  int64_t size() const override { return size_; }
  void SetEpoch(int64_t epoch) override { epoch_ = epoch; }
  std::vector<int64_t> Indices() const override;

 private:
  int64_t size_;
  int64_t seed_;
  int64_t epoch_ = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_DATA_SAMPLER_H_
