// TraceRecorder: a Chrome trace (chrome://tracing, Perfetto) of one rank's
// training: "X" (complete) events for data wait, forward, backward, the
// optimizer step, evaluation and, with DDP, each bucket's all-reduce from
// launch to completion.
//
//   TraceRecorder trace(/*rank=*/0);
//   auto start = TraceRecorder::Clock::now();
//   ... forward ...
//   trace.Complete("forward", "step", start, TraceRecorder::Clock::now());
//   LOCKSTEP_RETURN_IF_ERROR(trace.WriteFile("/tmp/trace/trace_rank0.json"));
//
// The file is {"traceEvents": [...], "displayTimeUnit": "ms"} with pid =
// rank, so the ranks' files can be opened side by side; tid 0 is the
// training thread, tid 1 the communication (bucket) events, which come from
// the thread that completed the all-reduce. Timestamps are microseconds since
// the recorder was made. Events are kept in memory (about 100 bytes each) up
// to `max_events`; later ones are counted, not kept, so a long run cannot
// exhaust memory. Thread-safe.
#ifndef LOCKSTEP_TRAINERS_TRACE_H_
#define LOCKSTEP_TRAINERS_TRACE_H_

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace lockstep {

class TraceRecorder {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kTrainThread = 0;
  static constexpr int kCommThread = 1;

  explicit TraceRecorder(int rank, size_t max_events = 1 << 20);

  // One complete event [start, end] with optional integer arguments.
  void Complete(std::string name, const char* category, Clock::time_point start, Clock::time_point end,
                int tid = kTrainThread, std::vector<std::pair<std::string, int64_t>> args = {});

  size_t size() const;
  size_t dropped() const;

  // The whole trace as JSON.
  std::string ToJson() const;
  // Writes ToJson() atomically (a reader never sees half a file).
  absl::Status WriteFile(const std::string& path) const;

 private:
  struct Event {
    std::string name;
    const char* category;
    double ts_us;
    double dur_us;
    int tid;
    std::vector<std::pair<std::string, int64_t>> args;
  };

  const int rank_;
  const size_t max_events_;
  const Clock::time_point origin_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
  size_t dropped_ = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_TRAINERS_TRACE_H_
