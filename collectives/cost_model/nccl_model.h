// NCCL's own latency-bandwidth model for all-reduce (ring and tree), as a
// second predictor beside lockstep's: the docs can show lockstep's
// prediction, the same α-β model's plain ring, and what NCCL's tuner would
// expect, for one topology.
//
//   using namespace lockstep::cost_model;
//   absl::StatusOr<Topology> t = MakeTopology(1024, 8);
//   NcclLink link;
//   link.bus_gbytes_per_s = 25.0 / 8;  // a 25 Gbit/s NIC per rank
//   absl::StatusOr<NcclPrediction> ring = NcclPredict(NcclAlgorithm::kRing, 64 << 20, *t, link);
//   absl::StatusOr<NcclPrediction> tree = NcclPredict(NcclAlgorithm::kTree, 64 << 20, *t, link);
//   // ring->time_us, ring->protocol
//
// Source: NVIDIA/nccl src/graph/tuning.cc at NCCL 2.30.7 (makefiles/version.mk;
// master commit 5067397c2676d5aed50042fc39e5c8ee96eb0027, tuning.cc last
// changed in 50bf0bca1a6b88b2a3e3cebf41f3b827fc9fb19e): the default tuner
// constants (baseLatencies, hwLatencies, llMaxBws), ncclTopoTuneModel's
// latency and bandwidth for ncclFuncAllReduce, and ncclTopoGetAlgoTime
// (treeCorrectionFactor, the ring's plateau factor). In µs and GB/s:
//
//   base latency       LL    LL128  Simple
//     tree             6.8   14.0   8.4
//     ring             6.6   14.0   8.4
//   per-hop latency (hwLatencies)
//     PCI   tree       1.0   1.9    4.0      ring 1.0  2.5  5.7
//     NVL   tree       0.6   1.25   4.0      ring 0.6  1.9  3.4
//     NET   tree       5.0   8.5    14       ring 2.7  4.0  14.0
//
// With nRanks = p, nNodes = H, ppn = L, nsteps = 2(p − 1):
//   intraLat = hw[PCI or NVL][algo][proto]; interLat = hw[NET][ppn == 1 ? tree : algo][proto]
//              (+ the network's own latency, twice for Simple);
//   ring: lat = base + (nsteps − nInter)·max(intraLat, netOverhead) + nInter·interLat,
//         nInter = 2(H − 1), netOverhead = 1 µs (Intel x86; ×3 for Simple; 0 on one node);
//         ×1.4 for Simple on several nodes when bytes/(channels·p) >= 64 (plateau, sm80+);
//   tree: lat = base + 2·((p/H − 1)·intraLat + floor(log2 H)·interLat);
//   bus bandwidth B (link.bus_gbytes_per_s: NCCL's nChannels·bwInter):
//     ring: LL min(llMaxBw, 0.5B), LL128 0.92B, Simple B; algorithm bandwidth × p/nsteps;
//     tree: 0.92B, then LL min(that/3.8, llMaxBw), LL128 ×120/128 (7/9 on one node);
//           × 0.5; × treeCorrectionFactor[proto][floor(log2(bytes/64))] below 2^23·64 B;
//   time = lat + bytes / (1000·bw) µs.
// llMaxBw: 39.0 on 1-2 nodes and 20.4 on more (Intel CPUs), 141.0 on one
// node (Hopper). Left out: the per-channel caps of LL128 and tree (GPU
// limits far above a NIC's bandwidth), CollNet/NVLS/PAT, and the tree's
// 0.85 for the plain (unbalanced) pattern.
#ifndef LOCKSTEP_COLLECTIVES_COST_MODEL_NCCL_MODEL_H_
#define LOCKSTEP_COLLECTIVES_COST_MODEL_NCCL_MODEL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectives/cost_model/topology.h"

namespace lockstep {
namespace cost_model {

enum class NcclAlgorithm { kTree, kRing };
enum class NcclProtocol { kLL, kLL128, kSimple };

absl::string_view NcclAlgorithmName(NcclAlgorithm algorithm);  // "tree", "ring"
absl::string_view NcclProtocolName(NcclProtocol protocol);     // "LL", "LL128", "Simple"

struct NcclLink {
  double bus_gbytes_per_s = 0;  // per rank, over the network (or inside the node on one node), > 0
  int channels = 2;             // NCCL's nChannels: only the ring's plateau test uses it
  double net_latency_us = 0;    // what the network plugin reports (graphs->latencyInter); 0 for most
  bool nvlink = false;          // GPUs of a node joined by NVLink (else PCI)
};

struct NcclPrediction {
  double time_us = 0;
  double latency_us = 0;
  double algorithm_gbytes_per_s = 0;
  NcclProtocol protocol = NcclProtocol::kSimple;
};

// All-reduce of `bytes` with one algorithm and protocol.
absl::StatusOr<NcclPrediction> NcclPredictProtocol(NcclAlgorithm algorithm, NcclProtocol protocol, int64_t bytes,
                                                   const Topology& topology, const NcclLink& link);

// The same with the protocol NCCL's tuner would take: the least time of
// LL, LL128 and Simple (ties: that order).
absl::StatusOr<NcclPrediction> NcclPredict(NcclAlgorithm algorithm, int64_t bytes, const Topology& topology,
                                           const NcclLink& link);

}  // namespace cost_model
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_COST_MODEL_NCCL_MODEL_H_
