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
//
// A line longer than kMaxLinePart bytes goes to the console (and the tail) in
// parts of kMaxLinePart bytes, each but the last ended by kLineContinuesMarker
// and a newline: the agent holds at most that much of a line per pipe,
// whatever a worker prints (a line without a newline used to be held whole
// and rescanned on every read). Log files get the worker's bytes exactly as
// written: no prefix, no marker, and no newline added at EOF.
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

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "core/deadline.h"
#include "core/fd.h"

namespace lockstep {
namespace launch {

// The most of one line the pump holds per pipe. Large enough that real lines
// (a printed config, a tensor) pass whole; small enough that any output costs
// the agent a bounded amount: this per pipe for the pending line (the tail
// keeps at most kMaxTailLineBytes of each line).
inline constexpr size_t kMaxLinePart = 64 << 10;
// The most of one line the tail keeps (the tail goes into the failure record
// in the store and into the summary): 20 lines stay under 100 KiB.
inline constexpr size_t kMaxTailLineBytes = 4 << 10;
// Ends a console line that is the first part of a longer one.
inline constexpr absl::string_view kLineContinuesMarker = " [lockstep-run: line continues]";

// Cuts a byte stream into console lines: every complete line, and every
// kMaxLinePart bytes of a longer one. Each byte is looked at once (a long
// line is never rescanned). A part is cut only once the byte after it is
// known not to be '\n', so a line of exactly kMaxLinePart bytes is one
// ordinary line, and no empty line follows a cut.
class LineSplitter {
 public:
  // `text`: without its '\n'. `continues`: the line goes on in the next part.
  using Sink = absl::FunctionRef<void(absl::string_view text, bool continues)>;

  void Feed(absl::string_view bytes, Sink emit);
  // At EOF: what is pending, if anything, as a last line.
  void Flush(Sink emit);
  size_t pending_size() const { return pending_.size(); }

 private:
  // The current line's bytes not yet emitted: at most kMaxLinePart (a full
  // part waits for the next byte).
  std::string pending_;
};

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
  // Before Start: the pump keeps running when every pipe is at EOF, until
  // Finish, so that AddLate can bring new ones (a restarted worker's).
  void AllowLateAdds() { late_adds_ = true; }
  void Start();
  // While running (AllowLateAdds): another pipe, read from the next poll.
  void AddLate(OutputStream stream);
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
    LineSplitter lines;
    bool eof = false;
  };
  void Run();
  void Emit(Stream& s, absl::string_view text, bool continues);  // One console line, `text` without '\n'.

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
  std::map<int, int> eofs_;                       // Guarded by mu_: pipes at EOF per local rank.
  std::map<int, int> added_;                      // Guarded by mu_: pipes added per local rank.
  std::vector<OutputStream> late_;                // Guarded by mu_: AddLate's, not yet polled.
  bool late_adds_ = false;
  bool stopped_ = false;  // Guarded by mu_.
  std::condition_variable eof_cv_;
};

}  // namespace launch
}  // namespace lockstep

#endif  // LOCKSTEP_TOOLS_LAUNCH_OUTPUT_PUMP_H_
