// OutputPump: carries the workers' stdout and stderr from their pipes to the
// console, prefixed "[<global rank>]:" line by line, and/or to log files, and
// keeps each worker's last lines for the failure summary.
//
//   OutputPump pump(/*tail_lines=*/20);
//   pump.Add({std::move(read_end), rank, local_rank, /*is_stderr=*/false,
//             /*to_console=*/true, std::move(log_file)});
//   pump.Start();
//   ... workers run and end ...
//   pump.Finish(DeadlineIn(2s));  // drains what is left
//   std::string last = pump.Tail(local_rank);
//
// One thread polls every pipe. A line goes to the console in one write(), so
// lines of different workers never mix within a line. A descendant of a
// worker that keeps a pipe open cannot hold Finish past its deadline.
#ifndef LOCKSTEP_TOOLS_LAUNCH_OUTPUT_PUMP_H_
#define LOCKSTEP_TOOLS_LAUNCH_OUTPUT_PUMP_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/deadline.h"
#include "core/fd.h"

namespace lockstep {
namespace launch {

struct OutputStream {
  Fd read_end;  // The pipe's read end.
  int rank = 0;
  int local_rank = 0;
  bool is_stderr = false;
  bool to_console = true;
  Fd log_file;  // Invalid: no file.
};

class OutputPump {
 public:
  // Console lines go to `stdout_fd` / `stderr_fd` (not owned).
  explicit OutputPump(size_t tail_lines, int stdout_fd = 1, int stderr_fd = 2);
  ~OutputPump();  // Finish(now) if still running.
  OutputPump(const OutputPump&) = delete;
  OutputPump& operator=(const OutputPump&) = delete;

  // Before Start only.
  void Add(OutputStream stream);
  void Start();
  // Reads until every pipe is at EOF or `deadline` passes, then stops.
  void Finish(Deadline deadline);
  // Waits until both pipes of `local_rank` are at EOF (its output is all
  // in Tail) or the deadline passes.
  void WaitEof(int local_rank, Deadline deadline);
  // The last lines (stdout and stderr as they came) of a local rank.
  std::string Tail(int local_rank) const;

 private:
  struct Stream {
    OutputStream out;
    std::string partial;
    bool eof = false;
  };
  void Run();
  void Emit(Stream& s, const std::string& line);  // `line` ends with '\n'.

  const size_t tail_lines_;
  const int stdout_fd_;
  const int stderr_fd_;
  std::vector<Stream> streams_;  // Owned by the thread while it runs.
  Fd wake_;                      // eventfd: Finish wakes Run.
  std::atomic<bool> finishing_{false};
  std::atomic<int64_t> finish_deadline_ns_{0};
  std::thread thread_;
  mutable std::mutex mu_;
  std::map<int, std::deque<std::string>> tails_;  // Guarded by mu_.
  std::map<int, int> eofs_;                        // Guarded by mu_: pipes at EOF per local rank.
  bool stopped_ = false;                           // Guarded by mu_.
  std::condition_variable eof_cv_;
};

}  // namespace launch
}  // namespace lockstep

#endif  // LOCKSTEP_TOOLS_LAUNCH_OUTPUT_PUMP_H_
