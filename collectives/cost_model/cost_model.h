// The constants of lockstep's α-β-γ cost model: what one message costs on
// each kind of link, what reducing a byte costs, what a round costs in CPU
// when ranks outnumber cores, and what setting up a group costs. Calibrated
// in the scale lab (tools/scale_lab: `model fit`), saved as JSON
// (collectives/cost_model/cost_model_json.h), and read by the predictors
// (collectives/cost_model/predict.h, collectives/cost_model/setup_cost.h).
//
//   using namespace lockstep::cost_model;
//   CostModel model = DefaultCostModel();
//   model.link(LinkKind::kTcpRemote) = LinkCost{50.0, 1.0 / 1250.0};  // 50 µs, 10 Gbit/s
//   absl::Status valid = ValidateCostModel(model);
//
// Terms:
//   α (alpha_us): the time of an empty message, one way, in µs, on a link
//     whose two ranks each have a core of their own (what a ping-pong
//     between two such ranks measures as half its round trip);
//   β (beta_us_per_byte): each further byte's time on that link;
//   γ (gamma_us_per_byte): reducing one byte (f32 sum into a buffer);
//   c (cpu_us_per_round): the CPU time and wake-up one rank spends per
//     communication round; it only shows when ranks share cores.
//
// How c enters: every round of every formula costs, besides its link term,
//     c · (max(1, A / C) − 1)
// where A is the number of ranks of a host active in that round and C the
// host's cores (Topology::cores_per_host). Why: a round ends when every
// rank has had its share of CPU; with A ≤ C each rank runs on its own core
// and that CPU time is already inside α (α is measured that way); with
// A > C the A ranks' work is serialized over C cores, so a round takes
// c · A / C of CPU, of which α already holds one c. This is c·max(1, A/C)
// per round with α counted net of the CPU (α_net = α − c): the same model,
// written so that α stays what a ping-pong measures. The lab's numbers fit it:
// 4 KiB all-reduce over loopback TCP, ~11 µs at 2 ranks on 2 cores (one
// round, A/C = 1: α + 4 KiB·β ≈ 11 µs), ~1.1 ms at 16 ranks on 2 cores (4
// rounds of ~275 µs, A/C = 8: 11 + 7c ≈ 275, so c ≈ 38 µs). A is the host's
// ranks (ranks_per_host) in every round of a flat algorithm (waiting ranks
// spin before they sleep, collectives/transport/tcp/tcp_transport.h) and in
// the intra-host phases of a hierarchical one; in its phase among the
// hosts' leaders A = 1 (one leader per host, the others asleep in their
// broadcast), so c adds nothing there.
#ifndef LOCKSTEP_COLLECTIVES_COST_MODEL_COST_MODEL_H_
#define LOCKSTEP_COLLECTIVES_COST_MODEL_COST_MODEL_H_

#include <array>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {
namespace cost_model {

enum class LinkKind {
  kShm,        // shared memory between two ranks of one host
  kTcpLocal,   // TCP between two ranks of one host (loopback)
  kTcpRemote,  // TCP between hosts: the lab's delayed links, or a real network
};
inline constexpr int kNumLinkKinds = 3;

// "shm", "tcp_local", "tcp_remote".
absl::string_view LinkKindName(LinkKind kind);
// InvalidArgument naming the word and the accepted ones.
absl::StatusOr<LinkKind> ParseLinkKind(absl::string_view name);

struct LinkCost {
  double alpha_us = 0;          // α: one empty message, one way
  double beta_us_per_byte = 0;  // β: each byte more
  // W: TCP's window, the most bytes in flight before an acknowledgement
  // (TcpTransportOptions::socket_buffer_bytes, 256 KiB, fixes it); 0: none.
  // A message of m bytes over f flows of one host link waits a round trip
  // per window beyond its first, less that window's own transfer:
  //   α + β·m·f + (ceil(m / W) − 1) · max(0, 2α − β·W·f)
  // (TransferTime). It binds where the bandwidth-delay product exceeds W:
  // 256 KiB at 25 Gbit/s is 84 µs of transfer, so from ~42 µs one way.
  double window_bytes = 0;
};

// The time of `bytes` over `link` when `flows` messages share it (above).
double TransferTime(const LinkCost& link, double bytes, double flows = 1);

// Set-up of a group (collectives/cost_model/setup_cost.h has the formula).
struct SetupCost {
  double constant_us = 0;           // process start-up, listening socket, first store round trip
  double store_us_per_request = 0;  // the TCP store's one server thread, per request
  double handshake_us = 0;          // one connection to a peer: connect, hello, reply
  // The same thread, per value a MULTI_GET answers (its copy and send):
  // measured alone (tools/bench:store_load), held fixed by FitSetup.
  double store_us_per_value = 0;
};

struct CostModel {
  std::array<LinkCost, kNumLinkKinds> links{};
  double gamma_us_per_byte = 0;  // γ
  double cpu_us_per_round = 0;   // c
  // φ: each byte that crosses between hosts, summed over every host sending
  // in a round, when the hosts' links share one capacity: an oversubscribed
  // switch, or the scale lab, whose links are one forwarder thread on the
  // machine's cores (there one flow alone gets what all get together, so
  // φ ≈ β_remote). A round across hosts then takes at least
  //   α_remote + φ · (the bytes all its sending hosts put on the network).
  // 0: a full-bisection network, each host's link its own.
  double fabric_us_per_byte = 0;
  SetupCost setup;

  LinkCost& link(LinkKind kind) { return links[static_cast<int>(kind)]; }
  const LinkCost& link(LinkKind kind) const { return links[static_cast<int>(kind)]; }
};

// Order-of-magnitude values from docs/PERFORMANCE.md and the lab's first
// runs (shm ~1 µs and ~8 GB/s, loopback TCP ~8 µs and ~4 GB/s, a lab link
// of 50 µs and 10 Gbit/s, f32 sums at ~10 GB/s, c = 38 µs): a starting
// point to print tables with, not a calibration.
CostModel DefaultCostModel();

// InvalidArgument naming the first field (as in the JSON: "links.shm.alpha_us")
// that is negative or not finite.
absl::Status ValidateCostModel(const CostModel& model);

}  // namespace cost_model
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_COST_MODEL_COST_MODEL_H_
