// Subprocess: one local child process (fork + exec), owned. lockstep's one
// way to start a program.
//
//   SubprocessOptions options;
//   options.argv = {"/proc/self/exe", "--nproc=0"};
//   options.env = {{"RANK", "1"}, {"WORLD_SIZE", "2"}};  // On top of this process's environment.
//   LOCKSTEP_ASSIGN_OR_RETURN(Subprocess child, Subprocess::Spawn(options));
//   LOCKSTEP_ASSIGN_OR_RETURN(ExitStatus status, child.Wait(deadline));
//   if (!status.success()) return absl::InternalError(status.ToString());
//
// A Subprocess that is destroyed while its child still runs kills it
// (SIGKILL, the whole group with new_process_group) and reaps it, so no early
// return leaks a process or a zombie. Waiting uses a pidfd (Linux >= 5.3)
// with poll(), so deadlines need neither SIGCHLD handlers nor sleeps, and
// signals go through the pidfd, never to a recycled pid.
//
// Spawn fails, naming the program, when the child cannot exec it: the child
// reports execve's errno through a close-on-exec pipe before exiting.
//
// Not thread-safe: one thread owns a Subprocess. Nothing else in the process
// may reap its children (no waitpid(-1), no SIGCHLD set to SIG_IGN).
#ifndef LOCKSTEP_CORE_SUBPROCESS_H_
#define LOCKSTEP_CORE_SUBPROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace lockstep {

// How a child ended: exited with a code, or killed by a signal.
class ExitStatus {
 public:
  static ExitStatus Exited(int code) { return ExitStatus(false, code); }
  static ExitStatus Signaled(int signal) { return ExitStatus(true, signal); }
  // From a waitpid() status word (WIFEXITED or WIFSIGNALED).
  static ExitStatus FromWaitStatus(int wstatus);

  bool exited() const { return !signaled_; }
  bool signaled() const { return signaled_; }
  int exit_code() const { return signaled_ ? -1 : value_; }  // -1 when signaled.
  int signal() const { return signaled_ ? value_ : 0; }      // 0 when exited.
  bool success() const { return !signaled_ && value_ == 0; }

  // "exited with code 3", "killed by signal 9 (Killed)".
  std::string ToString() const;

  bool operator==(const ExitStatus& other) const { return signaled_ == other.signaled_ && value_ == other.value_; }
  bool operator!=(const ExitStatus& other) const { return !(*this == other); }

 private:
  ExitStatus(bool signaled, int value) : signaled_(signaled), value_(value) {}
  bool signaled_;
  int value_;
};

struct SubprocessOptions {
  // argv[0] is the program's path; it is not searched on PATH (execve).
  std::vector<std::string> argv;
  // Set (or replaced) on top of this process's environment.
  std::vector<std::pair<std::string, std::string>> env;
  // Put the child in a new process group (its own pid): signals from the
  // terminal then skip it, and Kill()/SignalGroup() reach its descendants.
  bool new_process_group = false;
  // Descriptors that stay open in the child under the same number (their
  // close-on-exec flag is cleared in the child only). Create the rest with
  // O_CLOEXEC so that children never inherit each other's pipes.
  std::vector<int> inherit_fds;
  // > 0: alarm(alarm_seconds) in the child before exec. The pending alarm
  // survives exec, so a hung child dies of SIGALRM even if this process
  // itself is killed and never waits for it.
  unsigned alarm_seconds = 0;
  // Non-empty: the child (and every thread it starts) runs only on these
  // CPUs, as `mpirun --bind-to core` binds ranks. A CPU this process may not
  // use makes Spawn fail.
  std::vector<int> cpus;
  // >= 0: the child's stdout / stderr (dup2'ed onto 1 / 2; the original stays
  // as it was in the child, so create it with O_CLOEXEC), e.g. a pipe's write
  // end that the parent reads to prefix or capture the child's output.
  int stdout_fd = -1;
  int stderr_fd = -1;
  // > 0: the signal the child gets when the thread that spawned it dies
  // (prctl(PR_SET_PDEATHSIG)), so that no child outlives a SIGKILLed parent.
  // Spawn from a thread that lives as long as the child (the main thread):
  // the kernel sends it when that *thread* ends. A parent that died before
  // the prctl is caught too (the child checks getppid() and raises it).
  int parent_death_signal = 0;
};

// The CPUs this process may run on (its affinity mask), in increasing order.
std::vector<int> AllowedCpus();

struct WaitAnyResult {
  size_t index;       // Into the span given to WaitAny.
  ExitStatus status;  // Also in children[index].exit_status().
};

class Subprocess {
 public:
  using Clock = std::chrono::steady_clock;
  // Deadlines are points on the steady clock; time_point::max() waits forever.
  using Deadline = Clock::time_point;

  // Starts the child. Errors: InvalidArgument (empty argv), NotFound /
  // PermissionDenied / Internal when exec fails (naming the program and the
  // reason), Internal for fork or pidfd failures.
  static absl::StatusOr<Subprocess> Spawn(const SubprocessOptions& options);

  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  // Kills (SIGKILL) and reaps a child that has not been waited for.
  ~Subprocess();

  pid_t pid() const { return pid_; }
  // The program (argv[0]), for messages.
  const std::string& program() const { return program_; }
  // True once Wait/WaitAny has reaped the child.
  bool reaped() const { return reaped_; }
  // The status of a reaped child (meaningless before).
  const ExitStatus& exit_status() const { return status_; }

  // Waits for the child to end and reaps it. DeadlineExceeded (naming the
  // program and pid) when `deadline` passes first; the child keeps running
  // and may be waited for again. A reaped child returns its status again.
  absl::StatusOr<ExitStatus> Wait(Deadline deadline);
  absl::StatusOr<ExitStatus> Wait() { return Wait(Deadline::max()); }

  // Sends `sig` to the child (via its pidfd). OK when the child has already
  // ended (there is nobody to deliver to; Wait reports how it ended).
  absl::Status Signal(int sig);
  // Sends `sig` to the child's process group; needs new_process_group.
  absl::Status SignalGroup(int sig);
  // SIGKILL to the child, or to its whole group with new_process_group.
  // Does not reap: Wait() afterwards returns "killed by signal 9" (or how it
  // ended if it ended first).
  absl::Status Kill();

 private:
  friend absl::StatusOr<WaitAnyResult> WaitAny(absl::Span<Subprocess> children, Deadline deadline);
  Subprocess() = default;
  // Reaps the child if it has ended (true), without blocking.
  absl::StatusOr<bool> TryReap();
  void Release();  // Kills, reaps and closes; leaves *this empty.

  pid_t pid_ = -1;
  int pidfd_ = -1;
  bool group_ = false;
  bool reaped_ = false;
  ExitStatus status_ = ExitStatus::Exited(0);
  std::string program_;
};

// Waits until one of the children not yet reaped ends, reaps it and returns
// which one and how. When several have ended, the lowest index is returned;
// the next call returns the next one. DeadlineExceeded when the deadline
// passes first (nothing is killed); FailedPrecondition when every child has
// already been reaped. A launcher's loop:
//
//   while (any running) {
//     LOCKSTEP_ASSIGN_OR_RETURN(WaitAnyResult ended, WaitAny(absl::MakeSpan(children), deadline));
//     if (!ended.status.success()) ... kill the others ...
//   }
absl::StatusOr<WaitAnyResult> WaitAny(absl::Span<Subprocess> children, Subprocess::Deadline deadline);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_SUBPROCESS_H_
