#include "collectives/cost_model/all_gather_reduce_scatter_cost.h"

#include <algorithm>
#include <cstdint>

namespace lockstep {
namespace cost_model {
namespace {

// Round k of Bruck's all-gather: min(2^k, p − 2^k) blocks from r + 2^k.
Round BruckRound(const Level& level, int k, double bytes, bool reduce) {
  const int64_t distance = int64_t{1} << k;
  const double moved =
      static_cast<double>(std::min(distance, level.p - distance)) * bytes / static_cast<double>(level.p);
  return ShiftRound(level, distance, moved, reduce ? moved : 0);
}

// All ranks send one block to the right neighbour, p − 1 times, as a
// pipeline (AddRingChain).
Cost Ring(const Level& level, double bytes, bool reduce) {
  Cost cost;
  if (level.p <= 1) return cost;
  const double block = bytes / static_cast<double>(level.p);
  AddRingChain(level, ShiftRound(level, 1, block, reduce ? block : 0), level.p - 1, &cost);
  return cost;
}

}  // namespace

Cost RingAllGatherCost(const Level& level, double bytes) { return Ring(level, bytes, false); }

Cost RingReduceScatterCost(const Level& level, double bytes) { return Ring(level, bytes, true); }

Cost RecursiveDoublingAllGatherCost(const Level& level, double bytes) {
  Cost cost;
  if (level.p <= 1) return cost;
  const int log = FloorLog2(level.p);
  const double folded_p = static_cast<double>(int64_t{1} << log);
  const bool folded = !IsPowerOfTwo(level.p);
  if (folded) AddRounds(level, XorRound(level, 1, bytes / static_cast<double>(level.p), 0), 1, &cost);
  for (int k = 0; k < log; ++k) {
    const int64_t distance = int64_t{1} << k;
    AddRounds(level, XorRound(level, distance, static_cast<double>(distance) * bytes / folded_p, 0), 1, &cost);
  }
  if (folded) AddRounds(level, XorRound(level, 1, bytes, 0), 1, &cost);
  return cost;
}

Cost RecursiveHalvingReduceScatterCost(const Level& level, double bytes) {
  Cost cost;
  if (level.p <= 1) return cost;
  const int log = FloorLog2(level.p);
  const bool folded = !IsPowerOfTwo(level.p);
  if (folded) AddRounds(level, XorRound(level, 1, bytes, bytes), 1, &cost);
  for (int k = 0; k < log; ++k) {
    const double half = bytes / static_cast<double>(int64_t{2} << k);
    const int64_t distance = (int64_t{1} << log) >> (k + 1);
    AddRounds(level, XorRound(level, distance, half, half), 1, &cost);
  }
  if (folded) AddRounds(level, XorRound(level, 1, bytes / static_cast<double>(level.p), 0), 1, &cost);
  return cost;
}

Cost BruckAllGatherCost(const Level& level, double bytes) {
  Cost cost;
  for (int k = 0; k < CeilLog2(level.p); ++k) AddRounds(level, BruckRound(level, k, bytes, false), 1, &cost);
  return cost;
}

Cost BruckReduceScatterCost(const Level& level, double bytes) {
  Cost cost;
  for (int k = CeilLog2(level.p) - 1; k >= 0; --k) AddRounds(level, BruckRound(level, k, bytes, true), 1, &cost);
  return cost;
}

}  // namespace cost_model
}  // namespace lockstep
