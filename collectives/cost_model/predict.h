// Predict a collective's time for an algorithm, choose the fastest, and say
// what lockstep does today.
//
//   using namespace lockstep::cost_model;
//   absl::StatusOr<Topology> t = MakeTopology(/*p=*/1024, /*ranks_per_host=*/8);
//   const CostModel model = DefaultCostModel();  // or LoadCostModel("calib.json")
//   absl::StatusOr<Cost> ring = Predict(Op::kAllReduce, Algorithm::kRing, 64 << 20, *t, model);
//   absl::StatusOr<Choice> best = Choose(Op::kAllReduce, 64 << 20, *t, model);
//   absl::StatusOr<Algorithm> today = TodaysChoice(Op::kAllReduce, 64 << 20, *t);
//   // best->algorithm, best->cost.time_us; ring->time_us
//
// Predict dispatches to the formulas (collectives/cost_model/all_reduce_cost.h,
// all_gather_reduce_scatter_cost.h, rooted_cost.h, all_to_all_cost.h): flat
// algorithms run on FlatLevel(topology, options.transport) (shared memory
// on one host, TCP inside and across hosts otherwise), hierarchical ones on the host's
// shared memory and the leaders' kTcpRemote. Pipelined algorithms take
// their best chunk count.
//
// Choose is a pure function of its arguments: it evaluates the allowed
// algorithms in the order of the Algorithm enum and keeps the first with the
// least time (a later one must be strictly faster), so ranks that run the
// same build with the same model and inputs choose the same algorithm. (A
// different compiler or flags may round differently near a crossover; ranks
// of mixed builds should take rank 0's choice.)
#ifndef LOCKSTEP_COLLECTIVES_COST_MODEL_PREDICT_H_
#define LOCKSTEP_COLLECTIVES_COST_MODEL_PREDICT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/cost_model/collective.h"
#include "collectives/cost_model/cost_model.h"
#include "collectives/cost_model/step_cost.h"
#include "collectives/cost_model/topology.h"

namespace lockstep {
namespace cost_model {

struct PredictOptions {
  // The flat algorithms' transport (hierarchical ones always use shared
  // memory inside a host and TCP among the leaders).
  FlatTransport transport = FlatTransport::kAuto;
};

// InvalidArgument when the topology or model is invalid, bytes < 0, or
// `algorithm` does not implement `op` (the message lists the ones that do).
absl::StatusOr<Cost> Predict(Op op, Algorithm algorithm, int64_t bytes, const Topology& topology,
                             const CostModel& model, const PredictOptions& options = {});

struct Choice {
  Algorithm algorithm = Algorithm::kRing;
  Cost cost;
};

// The algorithm among `allowed` (empty: AlgorithmsFor(op)) with the least
// predicted time. InvalidArgument as Predict, or when an allowed algorithm
// does not implement `op`.
absl::StatusOr<Choice> Choose(Op op, int64_t bytes, const Topology& topology, const CostModel& model,
                              absl::Span<const Algorithm> allowed = {}, const PredictOptions& options = {});

// The rules lockstep applies today (AlgorithmOptions in
// collectives/algorithms/algorithm.h).
struct TodaysRules {
  int64_t small_message_bytes = 256 << 10;  // AlgorithmOptions::small_message_bytes
  int64_t element_bytes = 4;                // f32: all-reduce needs >= 1 element per rank for the ring
  // kTcp: the transport forced to TCP (LOCKSTEP_TRANSPORT=tcp): flat
  // everywhere, never hierarchical.
  FlatTransport transport = FlatTransport::kAuto;
  // The constants ChooseAllReduce weighs the ring against Rabenseifner's
  // with (AlgorithmOptions::link unset: LinkConstantsFor(transport)).
  struct Link {
    double latency_us, us_per_byte, reduce_us_per_byte;
    double message_us = 0;  // o: LinkConstants::message_us
  };
  Link network{50, 1.0 / 1250, 1.0 / 10000, 4};  // TCP
  Link shm{1, 1.0 / 8000, 1.0 / 10000, 0.5};
};

// What lockstep runs today (collectives/bootstrap/communicator_factory.cc,
// collectives/host_backend.cc, collectives/algorithms/all_reduce.cc,
// collectives/hierarchical/hierarchical_backend.cc):
//   transport (auto): one host: shared memory; one rank per host: TCP; several
//     hosts with several ranks each: hierarchical (shared memory inside,
//     TCP among the leaders) for all_reduce, broadcast, reduce and barrier,
//     the flat TCP mesh for the rest;
//   all_reduce: recursive doubling when bytes < small_message_bytes or
//     bytes / element_bytes < the group's size; otherwise Rabenseifner's
//     when its α-β-γ time on the group's link (`network` over TCP, `shm` on
//     one host) is below the ring's, else the ring (ChooseAllReduce in
//     collectives/algorithms/all_reduce.h; in a hierarchical group, among
//     the leaders, over TCP: group size = hosts);
//   all_gather: Bruck's when its α-β-γ time is below the ring's, else the
//     ring (UseBruck); reduce_scatter: recursive halving likewise
//     (UseRecursiveHalving); both over the flat group; all_to_all (blocks
//     of `bytes` / p, the even form): Bruck's when its α-β-γ-o time is
//     below the pairwise exchange's (UseBruckAllToAll; o times the ranks
//     per core, Topology::cores_per_host), else pairwise;
//   broadcast, reduce: the pipelined binary tree where its α-β(-γ) time
//     at its best chunk count is below the binomial tree's, else the
//     binomial tree (UsePipelinedTree); a hierarchical group chooses so
//     per level, and is priced here as binomial at every level;
//   barrier: dissemination.
absl::StatusOr<Algorithm> TodaysChoice(Op op, int64_t bytes, const Topology& topology, const TodaysRules& rules = {});

}  // namespace cost_model
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_COST_MODEL_PREDICT_H_
