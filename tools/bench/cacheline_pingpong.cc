// Cache-line ping-pong between two processes: tells which placement mode the
// host gave the two vCPUs right now (docs/PERFORMANCE.md: a round trip
// takes ~33 ns when they share an L3 and ~165 ns when they do not, and the
// mode switches every few seconds to minutes). Run it right before a timed
// block and file the block's figures under the mode it prints.
//
//   bazel run --config=opt //tools/bench:cacheline_pingpong
//   pingpong 34.2 shared_l3
//
// Prints `pingpong <median_round_trip_ns> <mode>`, mode `shared_l3` below
// --threshold_ns, `split` at or above it, `far` at or above --far_ns (a
// third placement seen on AMD EPYC hosts, round trips of ~400-500 ns where
// split ones take ~100), and `busy` when the round trips did
// not all finish within --budget_ms (the two processes did not each get a
// core, so the figure says nothing about the cache). Exit status 0 in all
// three cases: a caller records the mode and goes on.
//
// The parent forks a child; they share one MAP_SHARED|MAP_ANONYMOUS page with
// a std::atomic<uint64_t> alone on its first 64-byte line. The parent stores
// odd values and spins until the child answers with the next even one. Neither
// process is pinned: the benchmarks run where the OS puts them, and so must
// this. The figure is the median over --batches batches of
// --batch_round_trips round trips (after --warmup_round_trips), so a batch
// that a timer interrupt or a migration disturbed does not move it.
//
// It cannot hang: every spin loop has a deadline (--budget_ms, ~8x a normal
// split-mode run; the child's a second later), the child dies with its parent
// (PR_SET_PDEATHSIG) and answers a bounded number of times, and the parent
// kills and reaps the child whatever happens. When both processes share one
// vCPU (the other is busy), each round trip costs a scheduler time slice
// (~8 ms seen), so such a run ends at the budget as `busy`.
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <new>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"

ABSL_FLAG(double, threshold_ns, 80.0,
          "round trips below this are `shared_l3`, others `split` (BENCHMARKING.md: ~33 vs ~165 ns)");
ABSL_FLAG(double, far_ns, 250.0,
          "round trips at or above this are `far` (the vCPUs further apart than `split`: ~450 ns seen)");
ABSL_FLAG(int, batches, 20, "timed batches; the median batch is reported");
ABSL_FLAG(int, batch_round_trips, 10000, "round trips per batch");
ABSL_FLAG(int, warmup_round_trips, 10000, "untimed round trips first (page faults, both processes spinning)");
ABSL_FLAG(int, budget_ms, 300, "give up (mode `busy`) when the round trips take longer than this");

namespace lockstep {
namespace {

using Clock = std::chrono::steady_clock;

// Alone on its cache line (and the page is page-aligned), so that nothing
// else shares the line that bounces.
struct alignas(64) Line {
  std::atomic<uint64_t> value{0};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the atomic must work across processes");

// Never an odd value the parent sends (it sends 1, 3, 5, ... far below it).
constexpr uint64_t kStop = ~uint64_t{0};
// Check the clock once per this many spins: a clock read costs about as much
// as a round trip, so not on every spin.
constexpr int kSpinsPerClockCheck = 1024;

// Spins until `line` holds something other than `seen`, or the deadline
// passes. Returns the new value, or `seen` on a timeout. No pause instruction:
// it would add its own latency to every round trip we are measuring.
uint64_t WaitForChange(const Line& line, uint64_t seen, Clock::time_point deadline) {
  for (;;) {
    for (int i = 0; i < kSpinsPerClockCheck; ++i) {
      const uint64_t v = line.value.load(std::memory_order_acquire);
      if (v != seen) return v;
    }
    if (Clock::now() > deadline) return seen;
  }
}

// The child: answers each odd value v with v + 1 until kStop, its budget of
// answers, or the deadline, then exits without running atexit handlers (it is
// a fork of the parent).
[[noreturn]] void Child(Line& line, pid_t parent, int64_t max_answers, Clock::time_point deadline) {
  // Die with the parent; and if it already died before prctl, do not wait.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(1);
  uint64_t seen = 0;
  for (int64_t answers = 0; answers < max_answers; ++answers) {
    const uint64_t v = WaitForChange(line, seen, deadline);
    if (v == seen || v == kStop) _exit(0);
    line.value.store(v + 1, std::memory_order_release);
    seen = v + 1;
  }
  _exit(0);
}

struct Result {
  std::vector<double> batch_ns;  // Mean round trip of each finished batch.
  bool finished = false;         // Every batch within the budget.
  int64_t round_trips = 0;       // Completed, warm-up included.
};

// The parent's side: warm-up, then timed batches. `next` is the next odd value.
Result PingPong(Line& line, int warmup, int batches, int per_batch, Clock::time_point deadline) {
  Result result;
  uint64_t next = 1;
  auto round_trip = [&]() {
    line.value.store(next, std::memory_order_release);
    const uint64_t reply = WaitForChange(line, next, deadline);
    next += 2;
    if (reply != next - 1) return false;
    ++result.round_trips;
    return true;
  };
  for (int i = 0; i < warmup; ++i) {
    if (!round_trip()) return result;
  }
  for (int b = 0; b < batches; ++b) {
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < per_batch; ++i) {
      if (!round_trip()) return result;
    }
    result.batch_ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - start).count() / per_batch);
  }
  result.finished = true;
  return result;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int Run() {
  const int batches = absl::GetFlag(FLAGS_batches);
  const int per_batch = absl::GetFlag(FLAGS_batch_round_trips);
  const int warmup = std::max(0, absl::GetFlag(FLAGS_warmup_round_trips));
  const int budget_ms = absl::GetFlag(FLAGS_budget_ms);
  if (batches < 1 || per_batch < 1 || budget_ms < 1) {
    std::fprintf(stderr, "cacheline_pingpong: --batches, --batch_round_trips and --budget_ms must be >= 1\n");
    return 2;
  }
  void* page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) {
    std::perror("cacheline_pingpong: mmap");
    return 1;
  }
  Line* line = new (page) Line;
  const Clock::time_point begin = Clock::now();
  const Clock::time_point deadline = begin + std::chrono::milliseconds(budget_ms);
  const pid_t parent = getpid();
  std::fflush(nullptr);  // Nothing buffered twice across the fork.
  const pid_t child = fork();
  if (child < 0) {
    std::perror("cacheline_pingpong: fork");
    return 1;
  }
  if (child == 0) {
    // Slack after the parent's deadline: the parent gives up first and stops
    // the child; this only bounds a child whose parent vanished silently.
    Child(*line, parent, int64_t{warmup} + int64_t{batches} * per_batch, deadline + std::chrono::milliseconds(1000));
  }
  const Result result = PingPong(*line, warmup, batches, per_batch, deadline);
  const double elapsed_ns = std::chrono::duration<double, std::nano>(Clock::now() - begin).count();
  line->value.store(kStop, std::memory_order_release);
  kill(child, SIGKILL);  // Already gone or about to be; never wait on a spinner.
  waitpid(child, nullptr, 0);
  munmap(page, 4096);

  if (!result.finished) {
    // The mean over whatever finished, so the caller sees how slow it was;
    // the mode says not to file anything under it.
    const double ns = elapsed_ns / static_cast<double>(std::max<int64_t>(1, result.round_trips));
    std::printf("pingpong %.1f busy\n", ns);
    return 0;
  }
  const double median = Median(result.batch_ns);
  const char* mode = median < absl::GetFlag(FLAGS_threshold_ns) ? "shared_l3"
                     : median < absl::GetFlag(FLAGS_far_ns)     ? "split"
                                                                : "far";
  std::printf("pingpong %.1f %s\n", median, mode);
  return 0;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return lockstep::Run();
}
