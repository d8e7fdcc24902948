// The environment of one worker: torchrun's variables (PyTorch 1.13's
// LocalElasticAgent._start_workers) plus LOCKSTEP_STORE_TOKEN.
//
//   std::vector<std::pair<std::string, std::string>> env =
//       WorkerEnvironment(group, local_rank, options);
//
// TORCHELASTIC_USE_AGENT_STORE is never set: the workers make their own
// store at MASTER_ADDR:MASTER_PORT (rank 0 serves it, collectives/
// bootstrap/init_from_env.h), a port node rank 0 chose for this attempt; the token
// protects that store and the ranks' handshake.
#ifndef LOCKSTEP_TOOLS_LAUNCH_WORKER_ENV_H_
#define LOCKSTEP_TOOLS_LAUNCH_WORKER_ENV_H_

#include <string>
#include <utility>
#include <vector>

#include "tools/launch/rendezvous.h"

namespace lockstep {
namespace launch {

struct WorkerEnvOptions {
  std::string role = "default";
  std::string run_id = "none";
  int max_restarts = 0;
  // TORCHELASTIC_RESTART_COUNT: restarts after failures so far (a group
  // re-formed to take in a new node is not one, as in torchrun).
  int restart_count = 0;
  // OMP_NUM_THREADS=1 (torchrun: when unset and more than one worker per node).
  bool set_omp_num_threads = false;
};

std::vector<std::pair<std::string, std::string>> WorkerEnvironment(const GroupAssignment& group, int local_rank,
                                                                   const WorkerEnvOptions& options);

// torchrun's warning when it sets OMP_NUM_THREADS.
inline constexpr char kOmpWarning[] =
    "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system "
    "being overloaded, please further tune the variable for optimal performance in your application as needed.";

}  // namespace launch
}  // namespace lockstep

#endif  // LOCKSTEP_TOOLS_LAUNCH_WORKER_ENV_H_
