#include "tools/bench/driver.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/process_stats.h"
#include "core/status.h"

namespace lockstep {
namespace bench {

double Percentile(std::vector<double> values, double p) {
  const size_t n = values.size();
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(n)));
  rank = std::min(std::max<size_t>(rank, 1), n);
  std::nth_element(values.begin(), values.begin() + (rank - 1), values.end());
  return values[rank - 1];
}

TailFigures TailOf(const std::vector<double>& times, double p50) {
  TailFigures tail;
  if (times.empty()) return tail;
  tail.p99 = Percentile(times, 99);
  double excess = 0;
  for (double t : times) {
    tail.max = std::max(tail.max, t);
    if (t > 10 * p50) {
      excess += t - p50;
      tail.stalls += 1;
    }
  }
  tail.stall = excess / static_cast<double>(times.size());
  return tail;
}

void PrintHeader(const CollectiveDescriptor& op, const SweepOptions& options, const RunInfo& info) {
  std::printf("# lockstep collectives benchmark: op %s, dtype %s, reduce_op %s, %d ranks, transport %s\n",
              op.name.c_str(), std::string(DTypeName(options.dtype)).c_str(),
              std::string(ReduceOpName(options.args.reduce_op)).c_str(), info.world, info.transport.c_str());
  std::printf("# device %s; backend %s: %s\n", options.device.ToString().c_str(), info.backend.c_str(),
              info.backend_reason.c_str());
  if (!info.copy_path.empty()) std::printf("# shared-memory copy path (rank 0): %s\n", info.copy_path.c_str());
  std::printf(
      "# iters %d, warmup %d, check %s; time = slowest rank's mean; p50, p95 = the slowest rank's "
      "percentiles of its iteration times; GB/s = 1e9 bytes/s\n",
      options.iters, options.warmup, options.check ? "on" : "off");
  if (options.large_bytes > 0) {
    std::printf("# above %lld bytes: iters %d, warmup %d\n", static_cast<long long>(options.large_bytes),
                options.iters_large, options.warmup_large);
  }
  std::printf("#%12s %12s %6s %12s %10s %10s %12s %12s %8s\n", "bytes", "count", "type", "time(us)", "p50(us)",
              "p95(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  std::fflush(stdout);  // The group is up: say so now, not after the first size.
}

void PrintAlgorithms(const Communicator& comm, const CollectiveDescriptor& op, const SweepOptions& options) {
  if (op.name != "all_reduce") return;
  const int64_t element = static_cast<int64_t>(DTypeSize(options.dtype));
  std::string line;
  std::string current;
  int64_t first = 0, last = 0;
  auto flush = [&] {
    if (current.empty()) return;
    absl::StrAppend(&line, line.empty() ? "" : ", ", current, " ", first, first == last ? "" : "-",
                    first == last ? std::string() : absl::StrCat(last));
  };
  const double step = options.step_factor, end = static_cast<double>(options.max_bytes) * 1.0000001;
  for (double size = static_cast<double>(options.min_bytes); size <= end; size = size * step) {
    const int64_t bytes = static_cast<int64_t>(size);
    const std::string algorithm = comm.AllReduceAlgorithm(op.count(bytes, element, comm.size()), options.dtype);
    if (algorithm.empty()) return;
    if (algorithm != current) {
      flush();
      current = algorithm;
      first = bytes;
    }
    last = bytes;
    if (size * step <= size) break;
  }
  flush();
  std::printf("# all_reduce algorithm: %s\n", line.c_str());
  std::fflush(stdout);
}

namespace {

// One rank's figures for one size, in the order of the MAX reduction over
// the ranks (seconds, MiB, counts).
enum Figure {
  kMean,
  kP50,
  kP95,
  kPeakRssMib,
  kP99,
  kMax,
  kStall,
  kStalls,
  kCallerVcsw,
  kCallerIvcsw,
  kOtherVcsw,
  kOtherIvcsw,
  kSetupS,
  kFds,
  kReadyUnixS,
  kFigureCount,
};

// The context switches of the timed loop: the calling thread's, and the
// rest of the process's (the communicator's threads).
struct SwitchCounter {
  rusage caller{}, process{};
  void Start() {
    ::getrusage(RUSAGE_THREAD, &caller);
    ::getrusage(RUSAGE_SELF, &process);
  }
  void Stop(std::vector<double>& figures) const {
    rusage caller_after{}, process_after{};
    ::getrusage(RUSAGE_THREAD, &caller_after);
    ::getrusage(RUSAGE_SELF, &process_after);
    figures[kCallerVcsw] = static_cast<double>(caller_after.ru_nvcsw - caller.ru_nvcsw);
    figures[kCallerIvcsw] = static_cast<double>(caller_after.ru_nivcsw - caller.ru_nivcsw);
    figures[kOtherVcsw] = static_cast<double>(process_after.ru_nvcsw - process.ru_nvcsw) - figures[kCallerVcsw];
    figures[kOtherIvcsw] = static_cast<double>(process_after.ru_nivcsw - process.ru_nivcsw) - figures[kCallerIvcsw];
  }
};

// Waits for what a launch started (nothing: done).
absl::Status WaitFor(const std::shared_ptr<Work>& work) { return work == nullptr ? absl::OkStatus() : work->Wait(); }

absl::StatusOr<Buffers> MakeBuffers(const CollectiveDescriptor& op, const SweepOptions& options, int64_t count, int n,
                                    int rank) {
  BufferShape shape = op.shape(count, n, rank);
  Buffers b;
  LOCKSTEP_ASSIGN_OR_RETURN(b.input, Tensor::Zeros({shape.input}, options.dtype, options.device));
  LOCKSTEP_ASSIGN_OR_RETURN(b.output, Tensor::Zeros({shape.output}, options.dtype, options.device));
  b.counts = std::move(shape.counts);
  return b;
}

// This rank's figures for `iters` timed iterations (after the warm-up and a
// barrier).
absl::StatusOr<std::vector<double>> TimeIterations(Communicator& comm, const CollectiveDescriptor& op, const Buffers& b,
                                                   const SweepOptions& options) {
  for (int i = 0; i < options.warmup; ++i) LOCKSTEP_RETURN_IF_ERROR(WaitFor(op.launch(comm, b, options.args)));
  LOCKSTEP_RETURN_IF_ERROR(comm.Barrier()->Wait());
  const int iters = std::max(1, options.iters);
  std::vector<double> times(iters);  // Sized before the loop: the loop does not allocate.
  std::vector<double> figures(kFigureCount);
  SwitchCounter switches;
  switches.Start();
  const auto start = std::chrono::steady_clock::now();
  auto previous = start;
  for (int i = 0; i < iters; ++i) {
    LOCKSTEP_RETURN_IF_ERROR(WaitFor(op.launch(comm, b, options.args)));
    const auto now = std::chrono::steady_clock::now();
    times[i] = std::chrono::duration<double>(now - previous).count();
    previous = now;
  }
  figures[kMean] = std::chrono::duration<double>(previous - start).count() / iters;
  switches.Stop(figures);
  figures[kP50] = Percentile(times, 50);
  figures[kP95] = Percentile(times, 95);
  const TailFigures tail = TailOf(times, figures[kP50]);
  figures[kP99] = tail.p99;
  figures[kMax] = tail.max;
  figures[kStall] = tail.stall;
  figures[kStalls] = tail.stalls;
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  figures[kPeakRssMib] = static_cast<double>(usage.ru_maxrss) / 1024;  // Sizes grow: the peak at this size.
  return figures;
}

// The slowest rank's figures: the MAX of every figure over the ranks.
absl::StatusOr<std::vector<double>> Slowest(Communicator& comm, const std::vector<double>& mine) {
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor all, Tensor::FromVector<double>(mine));
  LOCKSTEP_RETURN_IF_ERROR(comm.AllReduce(all, ReduceOp::kMax)->Wait());
  return std::vector<double>(all.data<double>(), all.data<double>() + all.numel());
}

// Runs the op once on known data; the wrong elements of every rank
// together.
absl::StatusOr<int64_t> CountWrong(Communicator& comm, const CollectiveDescriptor& op, const Buffers& b,
                                   const OpArgs& args, int64_t count) {
  LOCKSTEP_RETURN_IF_ERROR(op.fill(b, comm.rank()));
  LOCKSTEP_RETURN_IF_ERROR(WaitFor(op.launch(comm, b, args)));
  Buffers host;  // What came, on the host.
  LOCKSTEP_ASSIGN_OR_RETURN(host.input, OnHost(b.input));
  LOCKSTEP_ASSIGN_OR_RETURN(host.output, OnHost(b.output));
  host.counts = b.counts;
  const int64_t mine = op.count_wrong(CheckInput{host, count, comm.size(), comm.rank(), args});
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor total, Tensor::FromVector<int64_t>(std::vector<int64_t>{mine}));
  LOCKSTEP_RETURN_IF_ERROR(comm.AllReduce(total, ReduceOp::kSum)->Wait());
  return total.data<int64_t>()[0];
}

// One row: the table's columns, or the JSON line with the tail's figures.
struct Row {
  std::string op;
  DType dtype;
  int world;
  std::string transport;
  int64_t bytes, count;
  double algbw, busbw;
  int64_t wrong;  // -1: not checked.
  std::vector<double> slowest;
  int iters = 0;  // timed iterations behind the figures
};

void PrintTableRow(const Row& r) {
  const std::vector<double>& f = r.slowest;
  const std::string wrong = r.wrong < 0 ? "N/A" : absl::StrCat(r.wrong);
  std::printf(" %12lld %12lld %6s %12.2f %10.2f %10.2f %12.3f %12.3f %8s\n", static_cast<long long>(r.bytes),
              static_cast<long long>(r.count), std::string(DTypeName(r.dtype)).c_str(), f[kMean] * 1e6, f[kP50] * 1e6,
              f[kP95] * 1e6, r.algbw, r.busbw, wrong.c_str());
}

void PrintJsonRow(const Row& r) {
  const std::vector<double>& f = r.slowest;
  std::printf(
      "{\"op\": \"%s\", \"dtype\": \"%s\", \"ranks\": %d, \"transport\": \"%s\", "
      "\"bytes\": %lld, \"count\": %lld, "
      "\"time_us\": %.3f, \"p50_us\": %.3f, \"p95_us\": %.3f, \"algbw_gbps\": %.4f, "
      "\"busbw_gbps\": %.4f, \"wrong\": %lld, \"peak_rss_mib\": %.1f, \"p99_us\": %.3f, "
      "\"max_us\": %.3f, \"stall_us\": %.4f, \"stalls\": %.0f, \"caller_vcsw\": %.0f, "
      "\"caller_ivcsw\": %.0f, \"other_vcsw\": %.0f, \"other_ivcsw\": %.0f, \"setup_s\": %.3f, "
      "\"fds\": %.0f, \"ready_unix_s\": %.3f, \"iters\": %d}\n",
      r.op.c_str(), std::string(DTypeName(r.dtype)).c_str(), r.world, r.transport.c_str(),
      static_cast<long long>(r.bytes), static_cast<long long>(r.count), f[kMean] * 1e6, f[kP50] * 1e6, f[kP95] * 1e6,
      r.algbw, r.busbw, static_cast<long long>(r.wrong), f[kPeakRssMib], f[kP99] * 1e6, f[kMax] * 1e6, f[kStall] * 1e6,
      f[kStalls], f[kCallerVcsw], f[kCallerIvcsw], f[kOtherVcsw], f[kOtherIvcsw], f[kSetupS], f[kFds], f[kReadyUnixS],
      r.iters);
}

// One size: timed, checked (--check) and printed by rank 0. An error when
// elements were wrong.
absl::Status RunSize(Communicator& comm, const CollectiveDescriptor& op, const SweepOptions& options,
                     const std::string& transport, int64_t bytes, double setup_s) {
  const int n = comm.size();
  const int64_t element = static_cast<int64_t>(DTypeSize(options.dtype));
  const int64_t count = op.count(bytes, element, n);
  LOCKSTEP_ASSIGN_OR_RETURN(Buffers buffers, MakeBuffers(op, options, count, n, comm.rank()));
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<double> mine, TimeIterations(comm, op, buffers, options));
  mine[kSetupS] = setup_s;
  // The wall clock when the set-up ended (process start + setup_s): a
  // launcher's start-up is this minus when the job was started.
  mine[kReadyUnixS] = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()) - ProcessAgeSeconds() + setup_s;
  mine[kFds] = OpenDescriptorCount();  // After this size: connections made on demand count.
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<double> slowest, Slowest(comm, mine));
  int64_t wrong = -1;
  if (options.check) {
    LOCKSTEP_ASSIGN_OR_RETURN(wrong, CountWrong(comm, op, buffers, options.args, count));
  }
  if (comm.rank() == 0) {
    Row row{op.name, options.dtype, n, transport, op.bytes(count, element, n), count, 0, 0, wrong, slowest};
    row.iters = std::max(1, options.iters);
    row.algbw = static_cast<double>(row.bytes) / slowest[kMean] / 1e9;
    row.busbw = row.algbw * op.bus_factor(n);
    if (options.json)
      PrintJsonRow(row);
    else
      PrintTableRow(row);
    std::fflush(stdout);
  }
  if (wrong > 0) return absl::DataLossError(absl::StrCat(wrong, " wrong elements at ", bytes, " bytes"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<double> MeasureSetup(Communicator& comm) {
  LOCKSTEP_RETURN_IF_ERROR(comm.Barrier()->Wait());
  return ProcessAgeSeconds();
}

absl::Status RunSweep(Communicator& comm, const CollectiveDescriptor& op, const SweepOptions& options,
                      const std::string& transport, double setup_s) {
  const double step = options.step_factor, last = static_cast<double>(options.max_bytes) * 1.0000001;
  SweepOptions large = options;
  large.iters = options.iters_large;
  large.warmup = options.warmup_large;
  for (double size = static_cast<double>(options.min_bytes); size <= last; size = size * step) {
    const int64_t bytes = static_cast<int64_t>(size);
    const bool is_large = options.large_bytes > 0 && bytes > options.large_bytes;
    LOCKSTEP_RETURN_IF_ERROR(RunSize(comm, op, is_large ? large : options, transport, bytes, setup_s));
    if (size * step <= size) break;
  }
  return comm.Barrier()->Wait();
}

}  // namespace bench
}  // namespace lockstep
