// The vocabulary of the cost model: which collective (Op) and which algorithm
// runs it (Algorithm), with their names on the command line and in JSON.
//
//   using namespace lockstep::cost_model;
//   for (Algorithm a : AlgorithmsFor(Op::kAllReduce)) {
//     std::printf("%s\n", std::string(AlgorithmName(a)).c_str());
//   }
//   absl::StatusOr<Op> op = ParseOp("all_reduce");
//
// `bytes`, everywhere in this package, means:
//   all_reduce, broadcast, reduce: the buffer on each rank;
//   all_gather: the output (p blocks of bytes/p, one per rank);
//   reduce_scatter: the input on each rank (p blocks of bytes/p);
//   all_to_all: each rank's send buffer (p blocks of bytes/p, one per peer);
//   barrier: ignored.
//
// The Algorithm enum's order is the tie order of Choose (collectives/cost_model/predict.h):
// when two algorithms predict exactly the same time, the one listed first
// wins, so every rank that runs the same code picks the same one.
#ifndef LOCKSTEP_COLLECTIVES_COST_MODEL_COLLECTIVE_H_
#define LOCKSTEP_COLLECTIVES_COST_MODEL_COLLECTIVE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {
namespace cost_model {

enum class Op { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce, kAllToAll, kBarrier };

enum class Algorithm {
  // all_reduce (kRing and kRecursiveDoubling also all_gather, kRing also reduce_scatter).
  kRing,
  kRecursiveDoubling,
  kRabenseifner,
  kBinaryTree,
  kDoubleBinaryTree,
  // all_reduce composed over hosts: reduce inside each host, the named
  // algorithm among the hosts' leaders, broadcast inside each host.
  kHierarchicalRing,
  kHierarchicalRecursiveDoubling,
  kHierarchicalRabenseifner,
  kHierarchicalDoubleBinaryTree,
  // reduce_scatter; all_gather, reduce_scatter and all_to_all (Bruck).
  kRecursiveHalving,
  kBruck,
  // broadcast and reduce.
  kBinomialTree,
  kPipelinedChain,
  kPipelinedTree,
  kHierarchicalBinomialTree,
  // all_to_all.
  kPairwise,
  // barrier.
  kDissemination,
  kHierarchicalDissemination,
};

// "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
// "all_to_all", "barrier".
absl::string_view OpName(Op op);
// "ring", "recursive_doubling", ..., "hierarchical_dissemination": the
// enumerator's name in snake case without the k.
absl::string_view AlgorithmName(Algorithm algorithm);

// InvalidArgument naming the word and the accepted ones.
absl::StatusOr<Op> ParseOp(absl::string_view name);
absl::StatusOr<Algorithm> ParseAlgorithm(absl::string_view name);

// The algorithms the model knows for `op`, in tie order.
std::vector<Algorithm> AlgorithmsFor(Op op);

// Whether `algorithm` is one of AlgorithmsFor(op).
bool Supports(Op op, Algorithm algorithm);

}  // namespace cost_model
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_COST_MODEL_COLLECTIVE_H_
