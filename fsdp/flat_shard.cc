#include "fsdp/flat_shard.h"

#include <algorithm>

namespace lockstep {

FlatShardLayout FlatShardLayout::Make(const std::vector<int64_t>& numels, int world) {
  FlatShardLayout layout;
  layout.numels = numels;
  layout.world = world;
  for (int64_t n : numels) {
    layout.offsets.push_back(layout.total);
    layout.total += n;
  }
  layout.shard = (layout.total + world - 1) / world;
  layout.padded = layout.shard * world;
  return layout;
}

std::pair<int64_t, int64_t> FlatShardLayout::ParameterRange(size_t i, int rank) const {
  const int64_t lo = std::max(offsets[i], rank * shard);
  const int64_t hi = std::min(offsets[i] + numels[i], (rank + 1) * shard);
  if (hi <= lo) return {0, 0};
  return {lo - offsets[i], hi - offsets[i]};
}

}  // namespace lockstep
