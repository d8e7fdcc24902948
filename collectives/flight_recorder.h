// FlightRecorder: a communicator's last operations in a fixed-size ring, so
// that when a group fails (a timeout, a peer's failure, a mismatch) every
// rank can say what it was doing and which rank is behind, as PyTorch 2.x's
// flight recorder does for ProcessGroupNCCL.
//
//   FlightRecorder recorder(/*capacity=*/64);
//   const uint64_t id = recorder.Start(record);   // when an operation starts
//   recorder.Finish(id, status.ok());             // when it ends
//   std::string json = recorder.ToJson(rank);      // the whole ring
//
// The Communicator records every operation it runs (collectives with the
// group's sequence number, point to point per peer and tag) and, when it
// fails, publishes its last records through the store and reads its peers'
// (collectives/communicator.h); AnalyzeFlightRecords turns those reports
// into the lines of its error: what each rank waits in, and which rank has
// not reached the operation the others are in, or ran another one in its
// place. Recording costs a coarse clock read and two uncontended spin-lock
// acquisitions per operation (the start time is the Communicator's
// deadline clock reading; docs/PERFORMANCE.md). Thread-safe.
#ifndef LOCKSTEP_COLLECTIVES_FLIGHT_RECORDER_H_
#define LOCKSTEP_COLLECTIVES_FLIGHT_RECORDER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {

struct FlightRecord {
  enum class State : uint8_t { kRunning, kDone, kFailed };
  uint64_t id = 0;   // Set by Start: the record's number.
  uint64_t seq = 0;  // The operation's sequence number.
  bool point_to_point = false;
  // "AllReduce #5 (f32, count 1000, SUM)": rendered by the caller only when
  // a report is made (see Describe below); the ring keeps the fields.
  const char* op = "";  // A static name: "AllReduce".
  uint8_t dtype = 0;    // core/dtype.h's value.
  int64_t count = 0;
  int32_t peer = -1;       // The root, or the peer; -1: none (-2: any rank).
  int16_t reduce_op = -1;  // core/reduce_op.h's value; -1: none.
  uint32_t tag = 0;        // Point to point.
  // The algorithm (a static string: "ring", "rabenseifner", ...); "": not
  // recorded for this operation.
  const char* algorithm = "";
  State state = State::kRunning;
  int64_t started_us = 0;  // Since the recorder began.
  // -1 while running. Read from the kernel's coarse clock (to its tick, a
  // few ms; never before started_us): the precise one would double the
  // cost of recording.
  int64_t ended_us = -1;
};

// "AllReduce #5 (f32, count 1000, SUM)", "Send #2 (i32, count 3, to rank 1, tag 7)".
std::string Describe(const FlightRecord& record);

class FlightRecorder {
 public:
  // `capacity` 0: nothing is recorded.
  explicit FlightRecorder(size_t capacity);

  size_t capacity() const { return ring_.size(); }
  // Records an operation that starts now (or at `now`, a steady_clock
  // reading the caller has anyway); returns its id for Finish.
  uint64_t Start(FlightRecord record);
  uint64_t Start(FlightRecord record, std::chrono::steady_clock::time_point now);
  // Marks it done (or failed) now; ignored once the ring has overwritten
  // it, or when it already ended.
  void Finish(uint64_t id, bool ok);
  // The records in the ring, oldest first.
  std::vector<FlightRecord> Snapshot() const;
  // Microseconds since the recorder began.
  int64_t NowUs() const;

  // The whole ring as a JSON object: {"rank", "now_us", "records": [...]}
  // with every field and each record's description. `last` > 0: only the
  // newest `last` records (a failure report's).
  std::string ToJson(int rank, size_t last = 0) const;

 private:
  // A spin lock: held for a few stores, uncontended but for the rare
  // report (cheaper than a mutex on every operation).
  class Lock {
   public:
    explicit Lock(std::atomic_flag& flag) : flag_(flag) {
      while (flag_.test_and_set(std::memory_order_acquire)) {
      }
    }
    ~Lock() { flag_.clear(std::memory_order_release); }

   private:
    std::atomic_flag& flag_;
  };

  const std::chrono::steady_clock::time_point begin_;
  const int64_t begin_ns_;          // begin_ in CLOCK_MONOTONIC nanoseconds (steady_clock's clock on Linux).
  std::vector<FlightRecord> ring_;  // [id % capacity]
  // Written on every operation: a cache line of their own, apart from the
  // owner's fields other threads poll.
  alignas(64) mutable std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
  uint64_t next_id_ = 0;
  char padding_[64 - sizeof(std::atomic_flag) - sizeof(uint64_t)];
};

// What one rank reported of itself when the group failed.
struct RankReport {
  int rank = 0;
  bool reported = false;  // false: nothing came within the window.
  // Its newest records, oldest first, as published (ToJson's fields).
  struct Op {
    uint64_t seq = 0;
    bool point_to_point = false;
    std::string description;
    std::string state;   // "running", "done" or "failed".
    double seconds = 0;  // Since it started.
  };
  std::vector<Op> ops;
};

// Parses a report that ToJson made (rank, records); malformed text is an
// error (a foreign or corrupt report), never a crash.
absl::StatusOr<RankReport> ParseRankReport(absl::string_view json);

// The failure report's text, one clause per rank ("rank 0 waits in
// AllReduce #5 (f32, count 1000, SUM) for 2.1 s; ..."), then which rank is
// behind or out of step, when one is: a rank whose newest collective is
// older than the others' ("rank 2 is behind: it has not started AllReduce
// #5; its newest collective is Barrier #4 (), done"), one that ran another
// collective at the same sequence number ("rank 2 ran Barrier #5 () where
// ranks 0, 1 ran AllReduce #5 (...)"), or one that did not report at all
// ("rank 2 has not reached AllReduce #5 (...)"). Empty when there is
// nothing to say (no reports).
std::string AnalyzeFlightRecords(const std::vector<RankReport>& reports);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_FLIGHT_RECORDER_H_
