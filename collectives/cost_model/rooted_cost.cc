#include "collectives/cost_model/rooted_cost.h"

#include <algorithm>

namespace lockstep {
namespace cost_model {
namespace {

// `steps(k)` steps of PipelineRound(per_step_chunks·n/k), reducing the same
// when reducing, with k chosen when `chunks` is 0.
template <typename Steps>
Cost Pipelined(const Level& level, Direction direction, double bytes, int64_t chunks, double per_step_chunks,
               Steps steps) {
  auto cost_for = [&](int64_t k) {
    const double s = per_step_chunks * bytes / static_cast<double>(k);
    Cost cost;
    AddRounds(level, PipelineRound(level, s, direction == Direction::kReduce ? s : 0), steps(k), &cost);
    return cost;
  };
  const int64_t k = chunks > 0 ? chunks : BestChunks(MaxChunks(bytes), [&](int64_t c) { return cost_for(c).time_us; });
  return cost_for(k);
}

}  // namespace

Cost BinomialTreeCost(const Level& level, Direction direction, double bytes) {
  Cost cost;
  const double reduce = direction == Direction::kReduce ? bytes : 0;
  for (int k = 0; k < CeilLog2(level.p); ++k) {
    AddRounds(level, BinomialRound(level, int64_t{1} << k, bytes, reduce), 1, &cost);
  }
  return cost;
}

Cost PipelinedChainCost(const Level& level, Direction direction, double bytes, int64_t chunks) {
  if (level.p <= 1) return Cost{};
  return Pipelined(level, direction, bytes, chunks, 1.0,
                   [&](int64_t k) { return static_cast<double>(level.p - 1 + k - 1); });
}

Cost PipelinedTreeCost(const Level& level, Direction direction, double bytes, int64_t chunks) {
  if (level.p <= 1) return Cost{};
  const int depth = FloorLog2(level.p);
  const double fan = static_cast<double>(std::min<int64_t>(2, level.p - 1));
  return Pipelined(level, direction, bytes, chunks, fan, [&](int64_t k) { return static_cast<double>(depth + k - 1); });
}

Cost HierarchicalBinomialTreeCost(const Topology& topology, const CostModel& model, Direction direction, double bytes) {
  const Level local = IntraHostLevel(topology, model);
  const Cost inside = BinomialTreeCost(local, direction, bytes);
  const Cost among = BinomialTreeCost(LeaderLevel(topology, model), direction, bytes);
  if (direction == Direction::kReduce) return inside + among;
  // Broadcast: the root's host, then the leaders, then the other hosts.
  return inside + among + (topology.hosts > 1 ? inside : Cost{});
}

}  // namespace cost_model
}  // namespace lockstep
