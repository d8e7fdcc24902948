#include "data/distributed_sampler.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "data/randperm.h"

namespace lockstep {

absl::StatusOr<DistributedSampler> DistributedSampler::Create(int64_t dataset_size,
                                                              const DistributedSamplerOptions& options) {
  const int64_t n = dataset_size;
  const int64_t r = options.num_replicas;
  if (r <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DistributedSampler: num_replicas = ", r, "; it must be at least 1 (the world size)"));
  }
  if (options.rank < 0 || options.rank >= r) {
    return absl::InvalidArgumentError(absl::StrCat("DistributedSampler: invalid rank ", options.rank,
                                                   ", rank should be in the interval [0, ", r - 1,
                                                   "] for num_replicas = ", r));
  }
  if (n <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DistributedSampler: the dataset has ", n,
                     " samples; every rank needs at least one. Check the dataset path and split"));
  }
  if (options.shuffle && n >= kMaxTorchRandpermSize) {
    return absl::InvalidArgumentError(absl::StrCat("DistributedSampler: shuffling ", n,
                                                   " samples is not supported (PyTorch switches to ",
                                                   "another randperm algorithm at ", kMaxTorchRandpermSize, ")"));
  }
  if (options.uneven && options.drop_last) {
    return absl::InvalidArgumentError(
        "DistributedSampler: uneven (no padding) and drop_last (cut to an even share) contradict each other; "
        "choose one");
  }
  // PyTorch: ceil((n - r) / r) with drop_last, else ceil(n / r). For n >= 1
  // the former is (n - 1) / r in integers, also when n < r (ceil(-0.25) = 0).
  // Uneven: the indices rank, rank + r, ... below n.
  const int64_t num_samples = options.uneven                      ? (n - options.rank + r - 1) / r
                              : (options.drop_last && n % r != 0) ? (n - 1) / r
                                                                  : (n + r - 1) / r;
  return DistributedSampler(n, options, num_samples);
}

std::vector<int64_t> DistributedSampler::Indices() const {
  const int64_t n = dataset_size_;
  const int64_t r = options_.num_replicas;
  const int64_t total = total_size();
  std::vector<int64_t> order;
  if (options_.shuffle) {
    // Python: g.manual_seed(seed + epoch); the int wraps into uint64.
    const uint64_t seed = static_cast<uint64_t>(options_.seed) + static_cast<uint64_t>(epoch_);
    order = *TorchRandperm(n, seed);  // n was checked in Create.
  } else {
    order = SequentialSampler(n).Indices();
  }
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(num_samples_));
  // Index j of the padded (or cut) list of length `total` is order[j % n].
  for (int64_t j = options_.rank; j < total; j += r) out.push_back(order[j % n]);
  return out;
}

}  // namespace lockstep
