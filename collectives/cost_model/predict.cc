#include "collectives/cost_model/predict.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/cost_model/all_gather_reduce_scatter_cost.h"
#include "collectives/cost_model/all_reduce_cost.h"
#include "collectives/cost_model/all_to_all_cost.h"
#include "collectives/cost_model/rooted_cost.h"

namespace lockstep {
namespace cost_model {
namespace {

absl::Status Unsupported(Op op, Algorithm algorithm) {
  std::vector<std::string> names;
  for (Algorithm a : AlgorithmsFor(op)) names.emplace_back(AlgorithmName(a));
  return absl::InvalidArgumentError(absl::StrCat("algorithm '", AlgorithmName(algorithm), "' does not implement ",
                                                 OpName(op), "; the model knows ", absl::StrJoin(names, ", ")));
}

// Predict without validation: `algorithm` implements `op`.
absl::StatusOr<Cost> Formula(Op op, Algorithm algorithm, double n, const Topology& topology, const CostModel& model,
                             const PredictOptions& options) {
  using A = Algorithm;
  const Level flat = FlatLevel(topology, model, options.transport);
  const Direction direction = op == Op::kReduce ? Direction::kReduce : Direction::kBroadcast;
  switch (op) {
    case Op::kAllReduce:
      switch (algorithm) {
        case A::kRing:
          return RingAllReduceCost(flat, n);
        case A::kRecursiveDoubling:
          return RecursiveDoublingAllReduceCost(flat, n);
        case A::kRabenseifner:
          return RabenseifnerAllReduceCost(flat, n);
        case A::kBinaryTree:
          return BinaryTreeAllReduceCost(flat, n, 0);
        case A::kDoubleBinaryTree:
          return DoubleBinaryTreeAllReduceCost(flat, n, 0);
        case A::kHierarchicalRing:
          return HierarchicalAllReduceCost(topology, model, A::kRing, n);
        case A::kHierarchicalRecursiveDoubling:
          return HierarchicalAllReduceCost(topology, model, A::kRecursiveDoubling, n);
        case A::kHierarchicalRabenseifner:
          return HierarchicalAllReduceCost(topology, model, A::kRabenseifner, n);
        case A::kHierarchicalDoubleBinaryTree:
          return HierarchicalAllReduceCost(topology, model, A::kDoubleBinaryTree, n);
        default:
          break;
      }
      break;
    case Op::kAllGather:
      switch (algorithm) {
        case A::kRing:
          return RingAllGatherCost(flat, n);
        case A::kRecursiveDoubling:
          return RecursiveDoublingAllGatherCost(flat, n);
        case A::kBruck:
          return BruckAllGatherCost(flat, n);
        default:
          break;
      }
      break;
    case Op::kReduceScatter:
      switch (algorithm) {
        case A::kRing:
          return RingReduceScatterCost(flat, n);
        case A::kRecursiveHalving:
          return RecursiveHalvingReduceScatterCost(flat, n);
        case A::kBruck:
          return BruckReduceScatterCost(flat, n);
        default:
          break;
      }
      break;
    case Op::kBroadcast:
    case Op::kReduce:
      switch (algorithm) {
        case A::kBinomialTree:
          return BinomialTreeCost(flat, direction, n);
        case A::kPipelinedChain:
          return PipelinedChainCost(flat, direction, n, 0);
        case A::kPipelinedTree:
          return PipelinedTreeCost(flat, direction, n, 0);
        case A::kHierarchicalBinomialTree:
          return HierarchicalBinomialTreeCost(topology, model, direction, n);
        default:
          break;
      }
      break;
    case Op::kAllToAll:
      switch (algorithm) {
        case A::kPairwise:
          return PairwiseAllToAllCost(flat, n);
        case A::kBruck:
          return BruckAllToAllCost(flat, n);
        default:
          break;
      }
      break;
    case Op::kBarrier:
      switch (algorithm) {
        case A::kDissemination:
          return DisseminationBarrierCost(flat);
        case A::kHierarchicalDissemination:
          return HierarchicalDisseminationBarrierCost(topology, model);
        default:
          break;
      }
      break;
  }
  return Unsupported(op, algorithm);
}

absl::Status ValidateInputs(int64_t bytes, const Topology& topology, const CostModel& model) {
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("bytes is ", bytes, "; it must be >= 0"));
  absl::Status s = ValidateTopology(topology);
  if (s.ok()) s = ValidateCostModel(model);
  return s;
}

}  // namespace

absl::StatusOr<Cost> Predict(Op op, Algorithm algorithm, int64_t bytes, const Topology& topology,
                             const CostModel& model, const PredictOptions& options) {
  absl::Status valid = ValidateInputs(bytes, topology, model);
  if (!valid.ok()) return valid;
  if (!Supports(op, algorithm)) return Unsupported(op, algorithm);
  return Formula(op, algorithm, static_cast<double>(bytes), topology, model, options);
}

absl::StatusOr<Choice> Choose(Op op, int64_t bytes, const Topology& topology, const CostModel& model,
                              absl::Span<const Algorithm> allowed, const PredictOptions& options) {
  absl::Status valid = ValidateInputs(bytes, topology, model);
  if (!valid.ok()) return valid;
  const std::vector<Algorithm> all = AlgorithmsFor(op);
  std::vector<bool> wanted(all.size(), allowed.empty());
  for (Algorithm a : allowed) {
    bool found = false;
    for (size_t i = 0; i < all.size(); ++i) {
      if (all[i] == a) wanted[i] = found = true;
    }
    if (!found) return Unsupported(op, a);
  }
  bool have = false;
  Choice best;
  for (size_t i = 0; i < all.size(); ++i) {  // Tie order: the enum's.
    if (!wanted[i]) continue;
    absl::StatusOr<Cost> cost = Formula(op, all[i], static_cast<double>(bytes), topology, model, options);
    if (!cost.ok()) return cost.status();
    if (!have || cost->time_us < best.cost.time_us) {
      best = Choice{all[i], *cost};
      have = true;
    }
  }
  return best;
}

namespace {

// ChooseAllReduce's comparison (collectives/algorithms/all_reduce.cc: the
// ring's 2(p-1) steps of n/p, its reductions overlapped, against
// Rabenseifner's 2 log2 p' steps of 2(p'-1)/p' n sent and reduced, plus a
// fold of two whole-buffer steps when p is not a power of two), restated
// here because this library depends on nothing of lockstep's.
bool RabenseifnerBeatsRing(double bytes, int64_t p, const TodaysRules::Link& link) {
  if (p < 2) return false;
  int64_t pow2 = 1;
  while (pow2 * 2 <= p) pow2 *= 2;
  const double a = link.latency_us, b = link.us_per_byte, g = link.reduce_us_per_byte;
  const double ring = 2.0 * static_cast<double>(p - 1) * (a + bytes / static_cast<double>(p) * b);
  const double fold = pow2 != p ? 2 * (a + bytes * b) + bytes * g : 0;
  const double part = static_cast<double>(pow2 - 1) / static_cast<double>(pow2) * bytes;
  const double rabenseifner = 2 * std::log2(static_cast<double>(pow2)) * a + part * (2 * b + g) + fold;
  return rabenseifner < ring;
}

// UseBruck (collectives/algorithms/all_gather.cc), restated: `bytes` the
// gathered buffer, `sharing` ranks behind each host's link.
bool BruckBeatsRing(double bytes, int64_t p, int64_t sharing, const TodaysRules::Link& link) {
  if (p <= 2) return false;
  const double a = link.latency_us, b = link.us_per_byte, g = link.reduce_us_per_byte;
  const double block = bytes / static_cast<double>(p);
  double bruck = bytes * g;
  for (int64_t have = 1; have < p; have <<= 1) {
    bruck += a + static_cast<double>(std::min(have, sharing) * std::min(have, p - have)) * block * b;
  }
  return bruck < static_cast<double>(p - 1) * (a + block * b);
}

// UseRecursiveHalving (collectives/algorithms/reduce_scatter.cc), restated:
// `bytes` the input, `sharing` ranks behind each host's link.
bool HalvingBeatsRing(double bytes, int64_t p, int64_t sharing, const TodaysRules::Link& link) {
  if (p <= 2) return false;
  int64_t pow2 = 1;
  while (pow2 * 2 <= p) pow2 *= 2;
  const double a = link.latency_us, b = link.us_per_byte, g = link.reduce_us_per_byte;
  const double n = static_cast<double>(p);
  double halving = bytes * g + (pow2 != p ? 2 * a + bytes * (b + g) + bytes / n * b : 0);
  double half = bytes;
  for (int64_t distance = pow2 / 2; distance >= 1; distance /= 2) {
    half /= 2;
    halving += a + half * (static_cast<double>(std::min(distance, sharing)) * b + g);
  }
  return halving < (n - 1) * (a + bytes / n * b);
}

// UsePipelinedTree (collectives/algorithms/pipelined_tree.cc), restated:
// the pipelined binary tree's best chunk count against the binomial tree.
bool PipelinedTreeBeatsBinomial(double bytes, double elements, int64_t p, bool reduce, const TodaysRules::Link& link) {
  if (p <= 2) return false;
  int64_t height = 0, rounds = 0;
  while ((int64_t{2} << height) <= p) ++height;
  while ((int64_t{1} << rounds) < p) ++rounds;
  const double a = link.latency_us, c = link.us_per_byte + (reduce ? link.reduce_us_per_byte : 0);
  const double fan = 2;
  auto tree = [&](double k) { return (static_cast<double>(height) + k - 1) * (a + fan * bytes / k * c); };
  const double most = std::max(1.0, std::min({elements, bytes / 4096, 1e6}));
  const double k = height <= 1 ? 1 : a > 0 ? std::sqrt(static_cast<double>(height - 1) * fan * bytes * c / a) : most;
  const double low = std::clamp(std::floor(k), 1.0, most), high = std::clamp(std::ceil(k), 1.0, most);
  return std::min(tree(low), tree(high)) < static_cast<double>(rounds) * (a + bytes * c);
}

// UseBruckAllToAll (collectives/algorithms/all_to_all.cc), restated:
// `block` the bytes each rank sends each rank, `sharing` ranks behind each
// host's link.
bool BruckBeatsPairwise(double block, int64_t p, int64_t sharing, double ranks_per_core, double small_message_bytes,
                        const TodaysRules::Link& link) {
  if (p <= 2 || block > small_message_bytes) return false;
  const double a = link.latency_us, b = link.us_per_byte, g = link.reduce_us_per_byte;
  const double o = link.message_us * ranks_per_core;
  const double n = static_cast<double>(p), shared = static_cast<double>(std::min(sharing, p));
  const double pairwise = a + 2 * (n - 1) * o + std::max(n - 1, shared * (n - shared)) * block * b;
  double bruck = 2 * n * block * g;
  for (int64_t step = 1; step < p; step <<= 1) {
    int64_t slots = 0;
    for (int64_t i = step; i < p; ++i) slots += (i & step) != 0 ? 1 : 0;
    bruck += a + 2 * o + static_cast<double>(slots * std::min(step, sharing)) * block * b + n * block * g;
  }
  return bruck < pairwise;
}

}  // namespace

absl::StatusOr<Algorithm> TodaysChoice(Op op, int64_t bytes, const Topology& topology, const TodaysRules& rules) {
  absl::Status valid = ValidateTopology(topology);
  if (!valid.ok()) return valid;
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("bytes is ", bytes, "; it must be >= 0"));
  if (rules.small_message_bytes < 0 || rules.element_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("TodaysRules: small_message_bytes is ", rules.small_message_bytes,
                                                   " and element_bytes ", rules.element_bytes,
                                                   "; they must be >= 0 and >= 1"));
  }
  const bool hierarchical = topology.mixed() && rules.transport == FlatTransport::kAuto;
  switch (op) {
    case Op::kAllReduce: {
      const int64_t group = hierarchical ? topology.hosts : topology.p;
      const bool small = bytes < rules.small_message_bytes || bytes / rules.element_bytes < group;
      const bool shm = topology.single_host() && rules.transport == FlatTransport::kAuto;
      const bool rabenseifner =
          !small && RabenseifnerBeatsRing(static_cast<double>(bytes), group, shm ? rules.shm : rules.network);
      if (hierarchical) {
        return small          ? Algorithm::kHierarchicalRecursiveDoubling
               : rabenseifner ? Algorithm::kHierarchicalRabenseifner
                              : Algorithm::kHierarchicalRing;
      }
      return small ? Algorithm::kRecursiveDoubling : rabenseifner ? Algorithm::kRabenseifner : Algorithm::kRing;
    }
    case Op::kAllGather:
    case Op::kReduceScatter: {
      const bool shm = topology.single_host() && rules.transport == FlatTransport::kAuto;
      const TodaysRules::Link& link = shm ? rules.shm : rules.network;
      // Over TCP the ranks of a host share its link (ranks_per_host in
      // CreateCommunicator); shared memory counts one.
      const int64_t sharing = shm ? 1 : topology.ranks_per_host;
      if (op == Op::kAllGather) {
        return BruckBeatsRing(static_cast<double>(bytes), topology.p, sharing, link) ? Algorithm::kBruck
                                                                                     : Algorithm::kRing;
      }
      return HalvingBeatsRing(static_cast<double>(bytes), topology.p, sharing, link) ? Algorithm::kRecursiveHalving
                                                                                     : Algorithm::kRing;
    }
    case Op::kAllToAll: {
      // The flat group (hierarchical groups run it there too).
      const bool shm = topology.single_host() && rules.transport == FlatTransport::kAuto;
      // CreateCommunicator's ranks_per_core: the most ranks on a host over
      // its cores (unknown: one each).
      const double ranks_per_core = topology.cores_per_host > 0
                                        ? std::max(1.0, static_cast<double>(topology.ranks_per_host) /
                                                            static_cast<double>(topology.cores_per_host))
                                        : 1.0;
      return BruckBeatsPairwise(static_cast<double>(bytes) / static_cast<double>(topology.p), topology.p,
                                shm ? 1 : topology.ranks_per_host, ranks_per_core,
                                static_cast<double>(rules.small_message_bytes), shm ? rules.shm : rules.network)
                 ? Algorithm::kBruck
                 : Algorithm::kPairwise;
    }
    case Op::kBroadcast:
    case Op::kReduce: {
      // The hierarchical form chooses per level as below; the model prices
      // its binomial form (an upper bound where a level pipelines).
      if (hierarchical) return Algorithm::kHierarchicalBinomialTree;
      const bool shm = topology.single_host() && rules.transport == FlatTransport::kAuto;
      return PipelinedTreeBeatsBinomial(static_cast<double>(bytes), static_cast<double>(bytes / rules.element_bytes),
                                        topology.p, op == Op::kReduce, shm ? rules.shm : rules.network)
                 ? Algorithm::kPipelinedTree
                 : Algorithm::kBinomialTree;
    }
    case Op::kBarrier:
      return hierarchical ? Algorithm::kHierarchicalDissemination : Algorithm::kDissemination;
  }
  return absl::InvalidArgumentError("TodaysChoice: unknown op");
}

}  // namespace cost_model
}  // namespace lockstep
