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
// every rank publishes its host and reads all p ranks' with one MultiGet (a
// MultiGet is one request per 1,024 keys: c(n) = ceil(n / 1024) requests for
// n keys); its TCP transport claims its rank and publishes a challenge and
// an address. A group on several hosts with several ranks each also sets
// up the leaders' transport over H ranks and each host's local group
// (shared memory over L ranks, which reads its L - 1 peers' two keys and
// connects them at once). One server thread answers all requests in turn.
//
// Connections::kOnDemand (the default): a TCP rank reads a peer's address
// (one request, 2 keys) and connects to it when it first talks to it; up to
// the first collective, a small all-reduce, that is recursive doubling's
// partners: P = ceil(log2 p) for a flat group; in a mixed group the flat
// transport stays idle and the leaders' has ceil(log2 H) partners:
//   R = p(4 + c(p) + P)        V = p(p + 2P)                      flat
//   R = p(4 + c(p)) + H(3 + P_H) + p(3 + c(2(L − 1)))
//   V = p² + 2H·P_H + 2p(L − 1)     P = P_H + (L − 1)              mixed
// Connections::kFullMesh (LOCKSTEP_RUNTIME_CONNECT=0): every transport reads
// every peer's two keys with one MultiGet and connects every peer:
//   R = p(4 + c(p) + c(2(p − 1)))
//       [+ H(3 + c(2(H − 1))) + p(3 + c(2(L − 1)))  when mixed]
//   V = p(p + 2(p − 1))   [+ 2H(H − 1) + 2p(L − 1)  when mixed]
//   P = p − 1  [+ (H − 1) + (L − 1) when mixed]
// Then
//   T_setup = constant_us + store_us_per_request·R + store_us_per_value·V
//             + handshake_us·P·max(1, L/C)
// (connections are made one peer after another, each a few round trips and
// an HMAC, and a host's L ranks share its C cores). The store's serial work
// and the ranks' handshakes are added, not overlapped: an upper bound.
// The square that remains on demand is the host identities: every rank
// reads all p of them (c(p) requests, p values) to learn the host layout.
//
// Warnings name the limits today's code meets at this p: a rank's sockets
// (2(p − 1) for the full mesh) beyond the usual 1024 descriptors, and more
// ranks than the store's max_connections (1000) at once.
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

// How the TCP transport connects its ranks (TcpTransportOptions::full_mesh).
enum class Connections { kOnDemand, kFullMesh };

struct SetupPrediction {
  double time_us = 0;
  double store_requests = 0;      // R
  double store_values = 0;        // V
  double peers_per_rank = 0;      // P
  int64_t sockets_per_rank = 0;   // 2P
  int64_t store_connections = 0;  // p: each rank keeps one to the store
  double store_us = 0;            // store_us_per_request·R + store_us_per_value·V
  double handshake_us = 0;        // handshake_us·P·max(1, L/C)
  std::vector<std::string> warnings;
};

absl::StatusOr<SetupPrediction> PredictSetup(const Topology& topology, const CostModel& model,
                                             Connections connections = Connections::kOnDemand);

// One measured set-up: the group and the time from start to the first
// collective's readiness.
struct SetupPoint {
  Topology topology;
  double time_us = 0;
  Connections connections = Connections::kOnDemand;
};

struct SetupFit {
  SetupCost cost;
  double rms_residual_us = 0;
  // The constants the fit held at 0 because the data wanted them negative
  // (a term too small to see at the measured p): "store_us_per_request", ...
  std::vector<std::string> zeroed;
};

// Non-negative least squares over (constant_us, handshake_us), the store's
// two constants held at the values given (measured alone, with
// tools/bench:store_load: for flat groups R grows almost as p, so a fit of
// set-up times could not tell it from the others): the best fit of T_setup
// among those with no negative constant (a term the data would make
// negative is held at 0 and named in `zeroed`). InvalidArgument when a
// point is invalid (naming it) or the points have fewer than 2 different p.
absl::StatusOr<SetupFit> FitSetup(absl::Span<const SetupPoint> points, double store_us_per_request,
                                  double store_us_per_value);

}  // namespace cost_model
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_COST_MODEL_SETUP_COST_H_
