// Set-up time of a lockstep group as a function of p: what today's code
// does before the first collective, and a fit of its constants.
//
//   using namespace lockstep::cost_model;
//   absl::StatusOr<Topology> t = MakeTopology(16384, 8);
//   absl::StatusOr<SetupPrediction> setup = PredictSetup(*t, DefaultCostModel());
//   // setup->time_us, setup->store_requests, setup->warnings
//
// Today (collectives/bootstrap/communicator_factory.cc,
// collectives/transport/tcp/tcp_transport.cc, collectives/store/tcp_store.cc):
// every rank publishes its host and reads all p ranks' (1 + p + 1 store
// requests), then builds a full mesh: claims its rank, publishes a
// challenge and an address, reads both for each of the p − 1 peers
// (3 + 2(p − 1)) and connects to every peer and accepts every peer (two
// sockets per pair). A group on several hosts with several ranks each
// also builds the leaders' mesh over H ranks and each host's local group
// (shared memory, the same store pattern over L ranks). One server thread
// answers all requests in turn, so
//   store_requests R = p(p + 2) + p(2p + 1)                 = 3p² + 3p
//                      [+ H(2H + 1) + p(2L + 1)  when mixed]
//   peers per rank   P = p − 1  [+ (H − 1) + (L − 1) when mixed]
//   T_setup = constant_us + store_us_per_request·R + handshake_us·P·max(1, L/C)
// (connections are made one peer after another, each a few round trips and
// an HMAC, and a host's L ranks share its C cores). The store's serial work
// and the ranks' handshakes are added, not overlapped: an upper bound.
//
// Warnings name the limits today's code meets at this p: a rank's sockets
// (2(p − 1) for the mesh) beyond the usual 1024 descriptors, and more ranks
// than the store's max_connections (1000) at once.
#ifndef LOCKSTEP_COLLECTIVES_COST_MODEL_SETUP_COST_H_
#define LOCKSTEP_COLLECTIVES_COST_MODEL_SETUP_COST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/cost_model/cost_model.h"
#include "collectives/cost_model/topology.h"

namespace lockstep {
namespace cost_model {

struct SetupPrediction {
  double time_us = 0;
  double store_requests = 0;      // R
  double peers_per_rank = 0;      // P
  int64_t sockets_per_rank = 0;   // 2P
  int64_t store_connections = 0;  // p: each rank keeps one to the store
  double store_us = 0;            // store_us_per_request·R
  double handshake_us = 0;        // handshake_us·P·max(1, L/C)
  std::vector<std::string> warnings;
};

absl::StatusOr<SetupPrediction> PredictSetup(const Topology& topology, const CostModel& model);

// One measured set-up: the group and the time from start to the first
// collective's readiness.
struct SetupPoint {
  Topology topology;
  double time_us = 0;
};

struct SetupFit {
  SetupCost cost;
  double rms_residual_us = 0;
  // The constants the fit held at 0 because the data wanted them negative
  // (a term too small to see at the measured p): "store_us_per_request", ...
  std::vector<std::string> zeroed;
};

// Non-negative least squares over (constant_us, store_us_per_request,
// handshake_us): the best fit of T_setup among those with no negative
// constant (every subset of the three terms is tried; a term the data
// would make negative is held at 0 and named in `zeroed`). InvalidArgument
// when a point is invalid (naming it) or the points have fewer than 3
// different p (the three terms cannot be told apart).
absl::StatusOr<SetupFit> FitSetup(absl::Span<const SetupPoint> points);

}  // namespace cost_model
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_COST_MODEL_SETUP_COST_H_
