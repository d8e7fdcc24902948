// The worker guard: a small process between an agent and each worker, so
// that a worker's own children never outlive an agent that was SIGKILLed.
//
// A worker gets a parent-death signal, so it dies with its agent; but
// processes the worker started (a data loader's workers, a shell
// pipeline, a compiler server) would live on, holding GPUs, ports and
// files. The agent therefore starts `lockstep-run --lockstep_worker_guard=
// <agent pid> <program> <args>` as the leader of the worker's process
// group (the same binary, so nothing else needs installing). The guard:
//   - gets a parent-death signal of its own (kWorkerGuardDeathSignal, a
//     real-time signal the agent never forwards) whose handler SIGKILLs
//     the whole process group: the worker and everything it started that
//     stayed in its group;
//   - ignores SIGINT, SIGTERM and SIGHUP, which the agent forwards to the
//     group for the worker (the agent's SIGKILL after the grace period
//     ends the guard too);
//   - starts the worker with default signal dispositions, an empty signal
//     mask and SIGKILL as its parent-death signal, waits for it, and exits
//     the way it did (its exit code, or the same signal, without a core
//     file of its own), so the agent's summary reports the worker's end.
// Processes that leave the group (setsid, setpgid) are out of its reach.
#ifndef LOCKSTEP_TOOLS_LAUNCH_WORKER_GUARD_H_
#define LOCKSTEP_TOOLS_LAUNCH_WORKER_GUARD_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace lockstep {
namespace launch {

// The first argument that makes lockstep-run a guard.
inline constexpr char kWorkerGuardFlag[] = "--lockstep_worker_guard=";

// The guard's parent-death signal (SIGRTMIN + 3).
int WorkerGuardDeathSignal();

// Whether `arg` (argv[1]) asks for the guard.
bool IsWorkerGuard(const char* arg);

// The argv that runs `worker_argv` under a guard of this process:
// this binary (/proc/self/exe), the flag with getpid(), then worker_argv.
std::vector<std::string> GuardedArgv(const std::vector<std::string>& worker_argv);

// The guard's main: argv[1] is the flag, argv[2..] the worker's argv.
// Returns only with an error code (127) when the worker cannot start (no
// program, a malformed pid, or the guard does not lead its own process
// group: run by hand, killing "its" group would hit the caller's);
// otherwise it exits as the worker did. If its parent is not the agent
// named (the agent died before the guard's parent-death signal was set),
// it kills its group, itself included.
int RunWorkerGuard(int argc, char** argv);

}  // namespace launch
}  // namespace lockstep

#endif  // LOCKSTEP_TOOLS_LAUNCH_WORKER_GUARD_H_
