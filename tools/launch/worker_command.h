// WorkerCommand: the argv every worker runs, from the training program and
// torchrun's --no_python / -m / --run_path, checked before anything starts.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(std::vector<std::string> argv, WorkerCommand(flags, getenv));
//
// - --no_python: the program itself, searched on PATH when it has no '/'.
// - -m: PYTHON -u -m MODULE ARGS.
// - a .py program (or --run_path): PYTHON -u SCRIPT ARGS.
// - otherwise an executable (a binary, or a script with #!) runs directly;
//   a file that is neither runs with PYTHON, as torchrun runs every script.
// PYTHON is $LOCKSTEP_PYTHON, else python3 on PATH (Debian's torch lives
// under /usr/bin/python3). -u keeps Python's output unbuffered, as torchrun.
#ifndef LOCKSTEP_TOOLS_LAUNCH_WORKER_COMMAND_H_
#define LOCKSTEP_TOOLS_LAUNCH_WORKER_COMMAND_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/launch/launch_flags.h"

namespace lockstep {
namespace launch {

absl::StatusOr<std::vector<std::string>> WorkerCommand(const LaunchFlags& flags, const GetEnvFn& getenv);

// `name` as execvp would find it: itself when it has a '/', else the first
// executable file of that name on `path`; NotFound otherwise.
absl::StatusOr<std::string> FindOnPath(const std::string& name, const std::string& path);

}  // namespace launch
}  // namespace lockstep

#endif  // LOCKSTEP_TOOLS_LAUNCH_WORKER_COMMAND_H_
