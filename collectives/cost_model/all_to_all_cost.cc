#include "collectives/cost_model/all_to_all_cost.h"

#include <algorithm>
#include <cstdint>

namespace lockstep {
namespace cost_model {

Cost PairwiseAllToAllCost(const Level& level, double bytes, double small_message_bytes) {
  Cost cost;
  if (level.p <= 1) return cost;
  const double block = bytes / static_cast<double>(level.p);
  const int64_t window = block <= small_message_bytes ? level.p - 1 : std::min(kPairwiseLargeWindow, level.p - 1);
  for (int64_t first = 1; first < level.p; first += window) {
    const int64_t last = std::min(level.p - 1, first + window - 1);
    Round round{0, 0, 0, false};
    for (int64_t s = first; s <= last; ++s) {
      const Round step = ShiftRound(level, s, block, 0);
      round.bytes += block;
      round.local = round.local || step.local;
      round.remote_flows += step.remote_flows;  // every crossing message is a flow (a connection) of its own
      round.host_remote_bytes += block * static_cast<double>(step.remote_flows);
    }
    AddRounds(level, round, 1, &cost);
  }
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
