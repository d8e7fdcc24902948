// WorkerGroup: the workers of one node for one attempt, started with their
// environment (worker_env.h), each in its own process group with a
// parent-death signal, their output carried by an OutputPump.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<WorkerGroup> workers,
//                             WorkerGroup::Start(spec, group));
//   while (...) {
//     LOCKSTEP_ASSIGN_OR_RETURN(std::optional<WorkerExit> ended, workers->WaitNext(deadline));
//     ...
//   }
//   workers->Stop(grace);  // SIGTERM to every group, SIGKILL after `grace`
//
// Start from the main thread: the parent-death signal fires when the
// spawning thread ends. No worker outlives its agent: a SIGKILLed agent's
// workers get SIGKILL from the kernel; otherwise Stop or the destructor
// ends them.
#ifndef LOCKSTEP_TOOLS_LAUNCH_WORKER_GROUP_H_
#define LOCKSTEP_TOOLS_LAUNCH_WORKER_GROUP_H_

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/subprocess.h"
#include "tools/launch/launch_flags.h"
#include "tools/launch/output_pump.h"
#include "tools/launch/rendezvous.h"
#include "tools/launch/worker_env.h"

namespace lockstep {
namespace launch {

struct WorkerSpec {
  std::vector<std::string> argv;  // From WorkerCommand.
  int nproc = 1;
  WorkerEnvOptions env;
  StreamSpec redirects;  // To the log file only.
  StreamSpec tee;        // To the log file and the console.
  // Non-empty: this attempt's log directory; worker files go to
  // <log_dir>/<local_rank>/{stdout,stderr}.log.
  std::string attempt_log_dir;
  size_t tail_lines = 20;
  // Workers may be restarted one at a time (Restart: lockstep-run
  // --fault_tolerant).
  bool restartable = false;
  // Set on top of every worker's environment.
  std::vector<std::pair<std::string, std::string>> extra_env;
};

struct WorkerExit {
  int local_rank;
  ExitStatus status;
};

class WorkerGroup {
 public:
  static absl::StatusOr<std::unique_ptr<WorkerGroup>> Start(const WorkerSpec& spec, const GroupAssignment& group);
  ~WorkerGroup();  // Stop(0) if anything still runs.

  // The next worker to end before `deadline`, or nullopt (deadline, or all
  // have ended).
  absl::StatusOr<std::optional<WorkerExit>> WaitNext(Subprocess::Deadline deadline);
  bool AllEnded() const;
  // SIGTERM to every running worker's group; SIGKILL once `grace` passed;
  // reaps them all and drains their output.
  void Stop(std::chrono::milliseconds grace);
  // Starts an ended worker again, alone, with its environment and
  // `extra_env` (appended: it wins); its output follows its predecessor's.
  // Only for a group started with spec.restartable.
  absl::Status Restart(int local_rank, const std::vector<std::pair<std::string, std::string>>& extra_env);
  // Process group ids of the workers still running (for signal forwarding).
  std::vector<pid_t> RunningGroups() const;
  // The last lines of a worker's output.
  std::string Tail(int local_rank) const { return pump_.Tail(local_rank); }
  // Waits (up to `deadline`) until an ended worker's output is all read.
  void WaitOutput(int local_rank, Deadline deadline) { pump_.WaitEof(local_rank, deadline); }

 private:
  explicit WorkerGroup(size_t tail_lines) : pump_(tail_lines) {}
  // One worker's process, its pipes added to the pump (`late`: running).
  absl::StatusOr<Subprocess> Spawn(int local_rank, const std::vector<std::pair<std::string, std::string>>& extra_env,
                                   bool late);
  WorkerSpec spec_;
  GroupAssignment group_;
  std::vector<Subprocess> workers_;
  OutputPump pump_;
  bool drained_ = false;
};

}  // namespace launch
}  // namespace lockstep

#endif  // LOCKSTEP_TOOLS_LAUNCH_WORKER_GROUP_H_
