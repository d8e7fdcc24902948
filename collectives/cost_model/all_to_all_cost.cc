#include "collectives/cost_model/all_to_all_cost.h"

#include <algorithm>
#include <cstdint>

namespace lockstep {
namespace cost_model {

Cost PairwiseAllToAllCost(const Level& level, double bytes) {
  Cost cost;
  const double block = bytes / static_cast<double>(level.p);
  for (int64_t s = 1; s < level.p; ++s) AddRounds(level, ShiftRound(level, s, block, 0), 1, &cost);
  return cost;
}

Cost BruckAllToAllCost(const Level& level, double bytes) {
  Cost cost;
  const double block = bytes / static_cast<double>(level.p);
  for (int k = 0; k < CeilLog2(level.p); ++k) {
    const int64_t bit = int64_t{1} << k;
    // Indices in [0, p) with bit k set: whole periods of 2^(k+1), then the tail.
    const int64_t count = level.p / (2 * bit) * bit + std::max<int64_t>(0, level.p % (2 * bit) - bit);
    AddRounds(level, ShiftRound(level, bit, static_cast<double>(count) * block, 0), 1, &cost);
  }
  return cost;
}

Cost DisseminationBarrierCost(const Level& level) {
  Cost cost;
  for (int k = 0; k < CeilLog2(level.p); ++k) AddRounds(level, ShiftRound(level, int64_t{1} << k, 0, 0), 1, &cost);
  return cost;
}

Cost HierarchicalDisseminationBarrierCost(const Topology& topology, const CostModel& model) {
  const Cost inside = DisseminationBarrierCost(IntraHostLevel(topology, model));
  return inside + DisseminationBarrierCost(LeaderLevel(topology, model)) + inside;
}

}  // namespace cost_model
}  // namespace lockstep
