// The benchmark's one driver, as nccl-tests' common.cu: the sweep over
// sizes, the warm-up, the timing, the percentiles and the tail, the --check
// run, and the table or JSON row, for any collective its descriptor
// (tools/bench/collective_descriptor.h) describes. collectives_main.cc
// parses the flags, builds the communicator and calls it:
//
//   LOCKSTEP_ASSIGN_OR_RETURN(double setup_s, MeasureSetup(*comm));
//   PrintHeader(*op, options, info);   // rank 0, table mode
//   LOCKSTEP_RETURN_IF_ERROR(RunSweep(*comm, *op, options, info.transport, setup_s));
//
// Per size, each rank times every iteration with one steady_clock read
// (iteration i ends where i + 1 starts, so the iterations add up to the
// loop and their mean is the mean reported) and takes its own mean, p50,
// p95 and tail; the row shows the largest of each over the ranks (the
// slowest rank, as nccl-tests reports). Pairing the ranks' i-th iterations
// instead would mislead: ranks can fall into anti-phase, one fast where the
// other is slow (seen at 4 KiB on 2 ranks as 5/45 us alternating), and
// every pair's maximum is then the slow one.
#ifndef LOCKSTEP_TOOLS_BENCH_DRIVER_H_
#define LOCKSTEP_TOOLS_BENCH_DRIVER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "collectives/communicator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "tools/bench/collective_descriptor.h"

namespace lockstep {
namespace bench {

struct SweepOptions {
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = 64 << 20;
  double step_factor = 2.0;  // > 1 unless min_bytes == max_bytes.
  int iters = 20;            // At least 1 runs.
  int warmup = 5;
  // Sizes above large_bytes (when > 0) run iters_large and warmup_large
  // iterations instead (OSU's large-message iterations): a sweep to 64 MiB
  // over many ranks and slow links in minutes, not hours.
  int64_t large_bytes = 0;
  int iters_large = 3;
  int warmup_large = 1;
  bool check = false;
  bool json = false;
  DType dtype = DType::kF32;
  OpArgs args;
  Device device = Device::Cpu();
};

// What the header names besides the options: the group and how it runs.
struct RunInfo {
  int world = 1;
  std::string transport;  // The communicator's capabilities().name.
  std::string backend;    // "host" or "nccl", and why.
  std::string backend_reason;
  std::string copy_path;  // Shared memory's copy path, or empty.
};

// The table's header lines (for rank 0 when not --json).
void PrintHeader(const CollectiveDescriptor& op, const SweepOptions& options, const RunInfo& info);

// For all_reduce, a header line with the algorithm the group runs at each
// size of the sweep ("# all_reduce algorithm: recursive_doubling 4096-131072,
// rabenseifner 262144-67108864"); nothing for other ops or a backend that
// does not say.
void PrintAlgorithms(const Communicator& comm, const CollectiveDescriptor& op, const SweepOptions& options);

// Set-up: process start to the end of the group's first collective (a
// barrier), in seconds: each row's setup_s shows the slowest rank's. Once per
// process, before the first sweep.
absl::StatusOr<double> MeasureSetup(Communicator& comm);

// Runs every size from min_bytes to max_bytes (x step_factor) on this rank;
// rank 0 prints a row per size. An error when --check finds wrong elements.
// One group runs as many sweeps as it likes, one op after another (the lab
// sweeps 8 ops over 64 ranks in one launch, not 8).
absl::Status RunSweep(Communicator& comm, const CollectiveDescriptor& op, const SweepOptions& options,
                      const std::string& transport, double setup_s);

// The nearest-rank percentile (the smallest value with at least p% of the
// values at or below it): always one of the measured times, never an
// interpolation between two. `values` must not be empty.
double Percentile(std::vector<double> values, double p);

// The tail of one rank's iteration times (seconds), whose median is `p50`:
// p99, the maximum, and the stalls, iterations slower than 10 x p50: how
// many, and their excess over p50 per iteration (what they add to the mean).
struct TailFigures {
  double p99 = 0, max = 0, stall = 0, stalls = 0;
};
TailFigures TailOf(const std::vector<double>& times, double p50);

}  // namespace bench
}  // namespace lockstep

#endif  // LOCKSTEP_TOOLS_BENCH_DRIVER_H_
