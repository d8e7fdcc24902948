// FlatShardLayout: where one FSDP unit's parameters lie in its flat buffer
// and how that buffer splits over the ranks, as PyTorch's FlatParameter
// (FSDP with use_orig_params=False):
//
//   FlatShardLayout layout = FlatShardLayout::Make({6, 3}, /*world=*/2);
//   // total 9, padded 10, shard 5: rank 0 holds elements 0-4, rank 1 5-9;
//   // parameter 1 lies at offset 6, all of it in rank 1's shard.
//
// The parameters lie end to end in registration order; the total is padded
// with zeros to a multiple of the world size, and rank r holds elements
// [r * shard, (r + 1) * shard). All-gathering the shards rank by rank gives
// the flat buffer back; reduce-scattering a flat gradient leaves each rank
// the sum over ranks of its own elements.
#ifndef LOCKSTEP_FSDP_FLAT_SHARD_H_
#define LOCKSTEP_FSDP_FLAT_SHARD_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace lockstep {

struct FlatShardLayout {
  std::vector<int64_t> numels;
  std::vector<int64_t> offsets;  // Into the flat buffer, per parameter.
  int64_t total = 0;             // Sum of numels.
  int64_t padded = 0;            // total rounded up to a multiple of world.
  int64_t shard = 0;             // padded / world.
  int world = 1;

  // `world` >= 1, numels >= 0.
  static FlatShardLayout Make(const std::vector<int64_t>& numels, int world);

  // The part of parameter `i` that lies in `rank`'s shard, as [begin, end)
  // in the parameter's own flat elements (begin == end when none does).
  std::pair<int64_t, int64_t> ParameterRange(size_t i, int rank) const;
};

}  // namespace lockstep

#endif  // LOCKSTEP_FSDP_FLAT_SHARD_H_
