// The building blocks of every formula in this package: the cost of one
// communication round over a group of ranks (a Level), the shapes of the
// rounds the algorithms use (shift, XOR, binomial, pipeline), and the sum
// of rounds (Cost).
//
//   using namespace lockstep::cost_model;
//   Level level;                       // 8 ranks, 4 per host
//   level.p = 8;
//   level.ranks_per_host = 4;
//   level.local = LinkCost{10.0, 0.001};
//   level.remote = LinkCost{50.0, 0.01};
//   Cost cost;
//   AddRounds(level, XorRound(level, /*distance=*/4, /*bytes=*/1000, /*reduce_bytes=*/1000), 1, &cost);
//   // cost.time_us == 50 + 0.01 * 1000 * 4 + 0 (4 ranks of a host cross at once)
//
// What a round costs. In one round each rank sends (and receives) at most
// `bytes`; the round ends when its slowest transfer does:
//   RoundTime = max(α_local + β_local·bytes            if some pair shares a host,
//                   α_remote + β_remote·bytes·flows,    if some pair crosses hosts,
//                   α_remote + φ·bytes·flows·senders    the same, on a shared fabric)
//             + γ·reduce_bytes + cpu
// (each link term TransferTime's, which adds TCP window stalls when a
// message exceeds the link's window_bytes: collectives/cost_model/cost_model.h)
// where `flows` is how many ranks of one host send across hosts in the same
// round: they share the host's one link to the network (the lab gives each
// host one TUN link; a real host one NIC), so its bytes add up while the
// latencies overlap. Inside a host every pair is assumed to have its own
// bandwidth (memory copies, loopback). φ (Level::fabric_us_per_byte, 0 on
// a full-bisection network) charges what all `senders` hosts of the round
// put on the network together against one capacity. `cpu` is Level::cpu_us_per_round,
// c·(max(1, A/C) − 1) (collectives/cost_model/cost_model.h says why).
// Reductions are not overlapped with the transfers (an upper bound for
// lockstep's pipelined ring, which reduces a segment while the next arrives).
//
// Placement: ranks of a Level sit host by host, ranks_per_host (L) each;
// round shapes below derive from that which pairs cross hosts.
#ifndef LOCKSTEP_COLLECTIVES_COST_MODEL_STEP_COST_H_
#define LOCKSTEP_COLLECTIVES_COST_MODEL_STEP_COST_H_

#include <cstdint>
#include <functional>

#include "collectives/cost_model/cost_model.h"
#include "collectives/cost_model/topology.h"

namespace lockstep {
namespace cost_model {

// A predicted collective: its time and the quantities that explain it.
struct Cost {
  double time_us = 0;
  double rounds = 0;         // rounds (pipeline steps) on the critical path
  double bytes = 0;          // bytes charged at β on the critical path, per rank
  double reduced_bytes = 0;  // bytes charged at γ on the critical path, per rank
};
Cost operator+(const Cost& a, const Cost& b);

// A group of ranks that one algorithm runs over, and its links.
struct Level {
  int64_t p = 1;               // ranks in the group
  int64_t ranks_per_host = 1;  // L: consecutive ranks per host (p / L hosts)
  LinkCost local;              // between two ranks of one host
  LinkCost remote;             // between hosts
  double gamma_us_per_byte = 0;
  double cpu_us_per_round = 0;    // added to every round: c·(max(1, A/C) − 1)
  double fabric_us_per_byte = 0;  // φ: CostModel::fabric_us_per_byte (0: none)

  int64_t hosts() const { return p / ranks_per_host; }
};

// The transport a flat group runs on (CommunicatorFactoryOptions::transport,
// LOCKSTEP_TRANSPORT): kAuto takes shared memory on one host and the TCP
// mesh on several (today's default); kTcp forces the TCP mesh everywhere
// (as the lab's loopback runs do).
enum class FlatTransport { kAuto, kTcp };

// All p ranks of `topology`, as a flat algorithm sees them: `local` is
// kShm on one host under kAuto and kTcpLocal otherwise; `remote` is
// kTcpRemote. A = ranks_per_host.
Level FlatLevel(const Topology& topology, const CostModel& model, FlatTransport transport = FlatTransport::kAuto);
// The ranks of one host over shared memory (a hierarchical algorithm's
// inner level; CommunicatorFactoryOptions::local_transport's default).
// A = ranks_per_host.
Level IntraHostLevel(const Topology& topology, const CostModel& model);
// One leader per host over kTcpRemote (a hierarchical algorithm's outer
// level). A = 1, so no CPU term.
Level LeaderLevel(const Topology& topology, const CostModel& model);

// c·(max(1, active/cores) − 1).
double CpuPerRound(double cpu_us_per_round, int64_t active_ranks_per_host, int cores_per_host);

struct Round {
  double bytes = 0;          // the most one rank sends (or receives) in the round
  double reduce_bytes = 0;   // what that rank then reduces
  int64_t remote_flows = 0;  // ranks of one host sending across hosts at once (0: none cross)
  bool local = true;         // some pair of the round shares a host
  // When > 0, what one host sends across hosts in the round, in place of
  // bytes·remote_flows (a round whose ranks send several blocks, some
  // across and some not: a window of pairwise steps).
  double host_remote_bytes = 0;
  // How many hosts send across hosts in the round (-1: every host), for the
  // fabric term: φ·(their bytes together).
  int64_t sending_hosts = -1;
};

double RoundTime(const Level& level, const Round& round);

// Adds `count` rounds of one shape to `cost`.
void AddRounds(const Level& level, const Round& round, double count, Cost* cost);

// Adds `steps` steps of a ring (ShiftRound(1) each) that runs as a pipeline,
// not in lock step: a rank forwards step k's block as soon as step k − 1's
// arrives from its left, so latencies add along a chain of `steps`
// consecutive edges, not as `steps` times the slowest edge. Ranks sit host
// by host, so one edge in L crosses hosts and the longest such chain
// crosses ceil(steps / L) of them (all when L = 1): its time is
//   crossings·α_remote + (steps − crossings)·α_local
//   + steps·(max(β_local·bytes, β_remote·bytes + window stalls) + γ·reduce_bytes + cpu)
// (every step still moves a block over the slowest edge, reduces it and
// wakes the rank). On one host, or with one host's worth of ranks, it is
// AddRounds'. The scale lab measured this: a ring all-gather over 4 hosts
// of 2 ranks with 2 ms links takes ~4 hops, not 7.
void AddRingChain(const Level& level, const Round& round, int64_t steps, Cost* cost);

// Rank r sends to r + distance (mod p), as in a ring (distance 1), Bruck
// and dissemination (2^k) and pairwise exchange (s). With several hosts, a
// host's ranks whose target is on another host: min(L, d, p − d) for
// d = distance mod p.
Round ShiftRound(const Level& level, int64_t distance, double bytes, double reduce_bytes);

// Rank r exchanges with r XOR distance (distance a power of two), as in
// recursive doubling and halving. No pair crosses hosts when L is a multiple
// of 2·distance; all L ranks of a host cross when distance >= L; otherwise
// some do, at most min(L, 2·distance) per host (exact when L is a power of
// two, the usual case; an upper bound otherwise).
Round XorRound(const Level& level, int64_t distance, double bytes, double reduce_bytes);

// A binomial tree's round (root 0, or any root that is a host's first
// rank): virtual ranks v < distance send to v + distance (< p). With
// distance >= L every pair crosses and a sending host has min(L, distance,
// p − distance) senders; with distance < L only the pairs with
// v + distance >= L cross, max(0, min(2·distance, p) − L) of them, all on host 0.
Round BinomialRound(const Level& level, int64_t distance, double bytes, double reduce_bytes);

// One step of a pipelined chain or tree over ranks numbered host by host:
// every edge is busy at once; with several hosts some edge crosses, one
// per host (a chain leaves a host once; an in-order tree over consecutive
// ranks has its host's subtree hang from one edge), so one flow.
Round PipelineRound(const Level& level, double bytes, double reduce_bytes);

int FloorLog2(int64_t x);  // x >= 1
int CeilLog2(int64_t x);   // x >= 1
inline bool IsPowerOfTwo(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

// The chunk count in [1, max_chunks] with the least `time(k)`, for a
// pipelined algorithm whose time is convex in k (steps·(a + b/k) is), found
// by an integer ternary search: deterministic, the smallest k on ties.
int64_t BestChunks(int64_t max_chunks, const std::function<double(int64_t)>& time);

// The most chunks a pipelined algorithm splits `bytes` into: chunks of at
// least kMinChunkBytes (a cache line), and at least one.
inline constexpr int64_t kMinChunkBytes = 64;
int64_t MaxChunks(double bytes);

}  // namespace cost_model
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_COST_MODEL_STEP_COST_H_
