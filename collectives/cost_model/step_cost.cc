#include "collectives/cost_model/step_cost.h"

#include <algorithm>
#include <cmath>

namespace lockstep {
namespace cost_model {

Cost operator+(const Cost& a, const Cost& b) {
  return Cost{a.time_us + b.time_us, a.rounds + b.rounds, a.bytes + b.bytes, a.reduced_bytes + b.reduced_bytes};
}

double CpuPerRound(double cpu_us_per_round, int64_t active_ranks_per_host, int cores_per_host) {
  const double ratio = static_cast<double>(active_ranks_per_host) / std::max(1, cores_per_host);
  return cpu_us_per_round * (std::max(1.0, ratio) - 1.0);
}

Level FlatLevel(const Topology& topology, const CostModel& model, FlatTransport transport) {
  Level level;
  level.p = topology.p;
  level.ranks_per_host = topology.ranks_per_host;
  const bool shm = transport == FlatTransport::kAuto && topology.single_host();
  level.local = model.link(shm ? LinkKind::kShm : LinkKind::kTcpLocal);
  level.remote = model.link(LinkKind::kTcpRemote);
  level.gamma_us_per_byte = model.gamma_us_per_byte;
  level.cpu_us_per_round = CpuPerRound(model.cpu_us_per_round, topology.ranks_per_host, topology.cores_per_host);
  level.fabric_us_per_byte = model.fabric_us_per_byte;
  return level;
}

Level IntraHostLevel(const Topology& topology, const CostModel& model) {
  Level level;
  level.p = topology.ranks_per_host;
  level.ranks_per_host = topology.ranks_per_host;
  level.local = model.link(LinkKind::kShm);
  level.remote = level.local;  // Never used: one host.
  level.gamma_us_per_byte = model.gamma_us_per_byte;
  level.cpu_us_per_round = CpuPerRound(model.cpu_us_per_round, topology.ranks_per_host, topology.cores_per_host);
  return level;
}

Level LeaderLevel(const Topology& topology, const CostModel& model) {
  Level level;
  level.p = topology.hosts;
  level.ranks_per_host = 1;
  level.remote = model.link(LinkKind::kTcpRemote);
  level.local = level.remote;  // Never used: one rank per host.
  level.gamma_us_per_byte = model.gamma_us_per_byte;
  level.cpu_us_per_round = 0;
  level.fabric_us_per_byte = model.fabric_us_per_byte;
  return level;
}

namespace {

// The round's transfer across hosts: remote_flows flows share the host
// link, each moving round.bytes, or host_remote_bytes / remote_flows when
// that is given (TransferTime: bandwidth and window stalls).
// With a shared fabric, what every sending host puts on the network together
// takes at least φ per byte.
double RemoteTime(const Level& level, const Round& round) {
  const double flows = static_cast<double>(round.remote_flows);
  const double per_flow = round.host_remote_bytes > 0 ? round.host_remote_bytes / flows : round.bytes;
  const double link = TransferTime(level.remote, per_flow, flows);
  if (level.fabric_us_per_byte <= 0) return link;
  const double senders = static_cast<double>(round.sending_hosts >= 0 ? round.sending_hosts : level.hosts());
  return std::max(link, level.remote.alpha_us + level.fabric_us_per_byte * per_flow * flows * senders);
}

}  // namespace

double RoundTime(const Level& level, const Round& round) {
  double link = 0;
  if (round.local) link = TransferTime(level.local, round.bytes);
  if (round.remote_flows > 0) link = std::max(link, RemoteTime(level, round));
  return link + level.gamma_us_per_byte * round.reduce_bytes + level.cpu_us_per_round;
}

void AddRounds(const Level& level, const Round& round, double count, Cost* cost) {
  if (count <= 0) return;
  cost->time_us += count * RoundTime(level, round);
  cost->rounds += count;
  cost->bytes += count * round.bytes;
  cost->reduced_bytes += count * round.reduce_bytes;
}

void AddRingChain(const Level& level, const Round& round, int64_t steps, Cost* cost) {
  if (steps <= 0) return;
  if (round.remote_flows == 0 || level.ranks_per_host <= 1) {
    AddRounds(level, round, static_cast<double>(steps), cost);  // every edge alike: lock step and chain agree
    return;
  }
  const int64_t L = level.ranks_per_host;
  const int64_t crossings = std::min(steps, (steps + L - 1) / L);
  const double n = static_cast<double>(steps);
  // A step's transfer beyond its α (bandwidth, window stalls), on the slower edge.
  const double transfer = std::max(TransferTime(level.local, round.bytes) - level.local.alpha_us,
                                   RemoteTime(level, round) - level.remote.alpha_us);
  cost->time_us += static_cast<double>(crossings) * level.remote.alpha_us +
                   static_cast<double>(steps - crossings) * level.local.alpha_us +
                   n * (transfer + level.gamma_us_per_byte * round.reduce_bytes + level.cpu_us_per_round);
  cost->rounds += n;
  cost->bytes += n * round.bytes;
  cost->reduced_bytes += n * round.reduce_bytes;
}

Round ShiftRound(const Level& level, int64_t distance, double bytes, double reduce_bytes) {
  Round round{bytes, reduce_bytes, 0, true};
  const int64_t p = level.p, L = level.ranks_per_host;
  if (level.hosts() <= 1) return round;
  const int64_t d = ((distance % p) + p) % p;
  round.remote_flows = std::min({L, d, p - d});
  round.local = round.remote_flows < L;
  return round;
}

Round XorRound(const Level& level, int64_t distance, double bytes, double reduce_bytes) {
  Round round{bytes, reduce_bytes, 0, true};
  const int64_t L = level.ranks_per_host;
  if (level.hosts() <= 1) return round;
  if (distance >= L) {
    round.remote_flows = L;
    round.local = false;
  } else if (L % (2 * distance) != 0) {
    round.remote_flows = std::min(L, 2 * distance);
  }
  return round;
}

Round BinomialRound(const Level& level, int64_t distance, double bytes, double reduce_bytes) {
  Round round{bytes, reduce_bytes, 0, true};
  const int64_t p = level.p, L = level.ranks_per_host;
  if (level.hosts() <= 1) return round;
  if (distance >= L) {
    // Virtual ranks v < min(distance, p − distance) send, host by host.
    const int64_t senders = std::min(distance, p - distance);
    round.remote_flows = std::min({L, distance, p - distance});
    round.sending_hosts = (senders + L - 1) / L;
    round.local = false;
  } else {
    round.remote_flows = std::max<int64_t>(0, std::min(2 * distance, p) - L);
    round.sending_hosts = 1;  // only host 0's ranks reach past it
  }
  return round;
}

Round PipelineRound(const Level& level, double bytes, double reduce_bytes) {
  Round round{bytes, reduce_bytes, 0, true};
  if (level.hosts() <= 1) return round;
  round.remote_flows = 1;
  round.local = level.ranks_per_host > 1;
  return round;
}

int FloorLog2(int64_t x) {
  int log = 0;
  while (x > 1) {
    x >>= 1;
    ++log;
  }
  return log;
}

int CeilLog2(int64_t x) {
  const int floor = FloorLog2(x);
  return IsPowerOfTwo(x) ? floor : floor + 1;
}

int64_t MaxChunks(double bytes) {
  const double chunks = std::floor(bytes / kMinChunkBytes);
  if (!(chunks >= 1)) return 1;
  return chunks > 1e15 ? int64_t{1000000000000000} : static_cast<int64_t>(chunks);
}

int64_t BestChunks(int64_t max_chunks, const std::function<double(int64_t)>& time) {
  int64_t lo = 1, hi = std::max<int64_t>(1, max_chunks);
  while (hi - lo > 2) {
    const int64_t m1 = lo + (hi - lo) / 3;
    const int64_t m2 = hi - (hi - lo) / 3;
    if (time(m1) <= time(m2)) {
      hi = m2;
    } else {
      lo = m1;
    }
  }
  int64_t best = lo;
  double best_time = time(lo);
  for (int64_t k = lo + 1; k <= hi; ++k) {
    const double t = time(k);
    if (t < best_time) {
      best = k;
      best_time = t;
    }
  }
  return best;
}

}  // namespace cost_model
}  // namespace lockstep
