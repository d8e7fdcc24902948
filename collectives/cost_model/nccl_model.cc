#include "collectives/cost_model/nccl_model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace cost_model {
namespace {

// NVIDIA/nccl src/graph/tuning.cc (NCCL 2.30.7), ncclTunerConstantsDefaults,
// indexed [algorithm: tree, ring][protocol: LL, LL128, Simple].
constexpr double kBaseLatency[2][3] = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}};
constexpr double kNvlinkLatency[2][3] = {{0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}};
constexpr double kPciLatency[2][3] = {{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}};
constexpr double kNetLatency[2][3] = {{5.0, 8.5, 14}, {2.7, 4.0, 14.0}};
// llMaxBws: Intel CPUs on 1 / 2 / more nodes (the multi-node row), and
// Hopper on one node.
constexpr double kLlMaxBwIntel[3] = {39.0, 39.0, 20.4};
constexpr double kLlMaxBwHopperOneNode = 141.0;
// getNetOverhead: Intel x86.
constexpr double kNetOverheadUs = 1.0;
// ncclTopoGetAlgoTime: the ring's plateau factor (minCompCap >= 80).
constexpr double kRingPlateau = 1.4;
// treeCorrectionFactor[protocol][log2(bytes / 64)], applied for 0 <= log < 23.
constexpr double kTreeCorrection[3][24] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9}};

// NCCL's log2i: floor(log2 n), -1 for 0.
int Log2i(int64_t n) {
  if (n <= 0) return -1;
  int log = 0;
  while (n > 1) {
    n >>= 1;
    ++log;
  }
  return log;
}

}  // namespace

absl::string_view NcclAlgorithmName(NcclAlgorithm algorithm) {
  return algorithm == NcclAlgorithm::kTree ? "tree" : "ring";
}

absl::string_view NcclProtocolName(NcclProtocol protocol) {
  switch (protocol) {
    case NcclProtocol::kLL:
      return "LL";
    case NcclProtocol::kLL128:
      return "LL128";
    case NcclProtocol::kSimple:
      return "Simple";
  }
  return "unknown";
}

absl::StatusOr<NcclPrediction> NcclPredictProtocol(NcclAlgorithm algorithm, NcclProtocol protocol, int64_t bytes,
                                                   const Topology& topology, const NcclLink& link) {
  absl::Status valid = ValidateTopology(topology);
  if (!valid.ok()) return valid;
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("NcclPredict: bytes is ", bytes, "; it must be >= 0"));
  if (!std::isfinite(link.bus_gbytes_per_s) || link.bus_gbytes_per_s <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("NcclLink.bus_gbytes_per_s is ", link.bus_gbytes_per_s, "; it must be a finite number > 0"));
  }
  if (link.channels < 1) {
    return absl::InvalidArgumentError(absl::StrCat("NcclLink.channels is ", link.channels, "; it must be >= 1"));
  }
  if (!std::isfinite(link.net_latency_us) || link.net_latency_us < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("NcclLink.net_latency_us is ", link.net_latency_us, "; it must be a finite number >= 0"));
  }
  NcclPrediction out;
  out.protocol = protocol;
  if (topology.p == 1) return out;  // NCCL: 0 for one rank.
  const int a = algorithm == NcclAlgorithm::kTree ? 0 : 1;
  const int proto = static_cast<int>(protocol);
  const bool simple = protocol == NcclProtocol::kSimple;
  const int64_t p = topology.p, nodes = topology.hosts;
  const double nsteps = 2.0 * static_cast<double>(p - 1);

  // Latency (ncclTopoTuneModel).
  double lat = kBaseLatency[a][proto];
  double intra_lat = link.nvlink ? kNvlinkLatency[a][proto] : kPciLatency[a][proto];
  double inter_lat = topology.ranks_per_host == 1 ? kNetLatency[0][proto] : kNetLatency[a][proto];
  inter_lat += link.net_latency_us * (simple ? 2 : 1);
  if (algorithm == NcclAlgorithm::kRing) {
    const double net_overhead = nodes > 1 ? kNetOverheadUs * (simple ? 3 : 1) : 0;
    intra_lat = std::max(intra_lat, net_overhead);
    const double inter_steps = nodes == 1 ? 0 : 2.0 * static_cast<double>(nodes - 1);
    lat += (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat;
  } else {
    lat += 2 * (static_cast<double>(p / nodes - 1) * intra_lat + Log2i(nodes) * inter_lat);
  }

  // Bandwidth.
  const double ll_max = nodes == 1 ? kLlMaxBwHopperOneNode : kLlMaxBwIntel[nodes <= 2 ? nodes - 1 : 2];
  double bw = link.bus_gbytes_per_s;
  if (algorithm == NcclAlgorithm::kRing) {
    if (protocol == NcclProtocol::kLL) bw = std::min(ll_max, bw * 0.5);
    if (protocol == NcclProtocol::kLL128) bw *= 0.92;
    bw *= static_cast<double>(p) / nsteps;
  } else {
    bw *= 0.92;
    if (protocol == NcclProtocol::kLL) bw = std::min(bw / 3.8, ll_max);
    if (protocol == NcclProtocol::kLL128) bw *= nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0;
    bw *= 0.5;
  }

  // ncclTopoGetAlgoTime.
  const int log_size = Log2i(bytes >> 6);
  if (algorithm == NcclAlgorithm::kTree && log_size >= 0 && log_size < 23) bw *= kTreeCorrection[proto][log_size];
  if (algorithm == NcclAlgorithm::kRing && simple && nodes > 1 && bytes / (link.channels * p) >= 64) {
    lat *= kRingPlateau;
  }
  out.latency_us = lat;
  out.algorithm_gbytes_per_s = bw;
  out.time_us = lat + static_cast<double>(bytes) / (1000.0 * bw);
  return out;
}

absl::StatusOr<NcclPrediction> NcclPredict(NcclAlgorithm algorithm, int64_t bytes, const Topology& topology,
                                           const NcclLink& link) {
  absl::StatusOr<NcclPrediction> best;
  for (NcclProtocol protocol : {NcclProtocol::kLL, NcclProtocol::kLL128, NcclProtocol::kSimple}) {
    absl::StatusOr<NcclPrediction> one = NcclPredictProtocol(algorithm, protocol, bytes, topology, link);
    if (!one.ok()) return one;
    if (!best.ok() || one->time_us < best->time_us) best = one;
  }
  return best;
}

}  // namespace cost_model
}  // namespace lockstep
