#include "collectives/cost_model/collective.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lockstep {
namespace cost_model {
namespace {

constexpr Op kOps[] = {Op::kAllReduce, Op::kAllGather, Op::kReduceScatter, Op::kBroadcast,
                       Op::kReduce,    Op::kAllToAll,  Op::kBarrier};

constexpr Algorithm kAlgorithms[] = {
    Algorithm::kRing,
    Algorithm::kRecursiveDoubling,
    Algorithm::kRabenseifner,
    Algorithm::kBinaryTree,
    Algorithm::kDoubleBinaryTree,
    Algorithm::kHierarchicalRing,
    Algorithm::kHierarchicalRecursiveDoubling,
    Algorithm::kHierarchicalRabenseifner,
    Algorithm::kHierarchicalDoubleBinaryTree,
    Algorithm::kRecursiveHalving,
    Algorithm::kBruck,
    Algorithm::kBinomialTree,
    Algorithm::kPipelinedChain,
    Algorithm::kPipelinedTree,
    Algorithm::kHierarchicalBinomialTree,
    Algorithm::kPairwise,
    Algorithm::kDissemination,
    Algorithm::kHierarchicalDissemination,
};

}  // namespace

absl::string_view OpName(Op op) {
  switch (op) {
    case Op::kAllReduce:
      return "all_reduce";
    case Op::kAllGather:
      return "all_gather";
    case Op::kReduceScatter:
      return "reduce_scatter";
    case Op::kBroadcast:
      return "broadcast";
    case Op::kReduce:
      return "reduce";
    case Op::kAllToAll:
      return "all_to_all";
    case Op::kBarrier:
      return "barrier";
  }
  return "unknown_op";
}

absl::string_view AlgorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kRecursiveDoubling:
      return "recursive_doubling";
    case Algorithm::kRabenseifner:
      return "rabenseifner";
    case Algorithm::kBinaryTree:
      return "binary_tree";
    case Algorithm::kDoubleBinaryTree:
      return "double_binary_tree";
    case Algorithm::kHierarchicalRing:
      return "hierarchical_ring";
    case Algorithm::kHierarchicalRecursiveDoubling:
      return "hierarchical_recursive_doubling";
    case Algorithm::kHierarchicalRabenseifner:
      return "hierarchical_rabenseifner";
    case Algorithm::kHierarchicalDoubleBinaryTree:
      return "hierarchical_double_binary_tree";
    case Algorithm::kRecursiveHalving:
      return "recursive_halving";
    case Algorithm::kBruck:
      return "bruck";
    case Algorithm::kBinomialTree:
      return "binomial_tree";
    case Algorithm::kPipelinedChain:
      return "pipelined_chain";
    case Algorithm::kPipelinedTree:
      return "pipelined_tree";
    case Algorithm::kHierarchicalBinomialTree:
      return "hierarchical_binomial_tree";
    case Algorithm::kPairwise:
      return "pairwise";
    case Algorithm::kDissemination:
      return "dissemination";
    case Algorithm::kHierarchicalDissemination:
      return "hierarchical_dissemination";
  }
  return "unknown_algorithm";
}

absl::StatusOr<Op> ParseOp(absl::string_view name) {
  std::vector<std::string> known;
  for (Op op : kOps) {
    if (OpName(op) == name) return op;
    known.emplace_back(OpName(op));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown collective '", name, "'; expected one of ", absl::StrJoin(known, ", ")));
}

absl::StatusOr<Algorithm> ParseAlgorithm(absl::string_view name) {
  std::vector<std::string> known;
  for (Algorithm a : kAlgorithms) {
    if (AlgorithmName(a) == name) return a;
    known.emplace_back(AlgorithmName(a));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown algorithm '", name, "'; expected one of ", absl::StrJoin(known, ", ")));
}

std::vector<Algorithm> AlgorithmsFor(Op op) {
  using A = Algorithm;
  switch (op) {
    case Op::kAllReduce:
      return {A::kRing,
              A::kRecursiveDoubling,
              A::kRabenseifner,
              A::kBinaryTree,
              A::kDoubleBinaryTree,
              A::kHierarchicalRing,
              A::kHierarchicalRecursiveDoubling,
              A::kHierarchicalRabenseifner,
              A::kHierarchicalDoubleBinaryTree};
    case Op::kAllGather:
      return {A::kRing, A::kRecursiveDoubling, A::kBruck};
    case Op::kReduceScatter:
      return {A::kRing, A::kRecursiveHalving, A::kBruck};
    case Op::kBroadcast:
    case Op::kReduce:
      return {A::kBinomialTree, A::kPipelinedChain, A::kPipelinedTree, A::kHierarchicalBinomialTree};
    case Op::kAllToAll:
      return {A::kBruck, A::kPairwise};
    case Op::kBarrier:
      return {A::kDissemination, A::kHierarchicalDissemination};
  }
  return {};
}

bool Supports(Op op, Algorithm algorithm) {
  const std::vector<Algorithm> all = AlgorithmsFor(op);
  return std::find(all.begin(), all.end(), algorithm) != all.end();
}

}  // namespace cost_model
}  // namespace lockstep
