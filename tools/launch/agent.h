// Agent: one node's launcher, torchrun's LocalElasticAgent. It meets the
// other agents at the rendezvous store, runs this node's workers, watches
// them and the group, and restarts the group on failure.
//
//   AgentOptions options;  // from the command line (launch_flags.h)
//   SignalForwarder forwarder;
//   return RunAgent(options, &forwarder);  // the process's exit code
//
// Each attempt:
//   1. rendezvous (rendezvous.h): node ranks, world size, MASTER_ADDR and a
//      fresh MASTER_PORT and worker token chosen by node rank 0;
//   2. start the workers (worker_group.h);
//   3. watch, every tick (monitor_interval, shorter when heartbeats need it;
//      a worker's exit wakes the agent at once): a local worker that fails
//      is published as the attempt's failure; another node's failure, an
//      agent whose heartbeat stopped, or the store gone (its host died)
//      fail the attempt here too;
//   4. on failure say so (a<k>/left), stop the workers (SIGTERM, SIGKILL
//      after stop_grace, LOCKSTEP_STOP_GRACE_SECONDS), wait up to
//      heartbeat_timeout for the other agents to say so too (one that does
//      not is lost: the summary names it as the likely cause of a worker's
//      failure) and either join attempt + 1 (restarts left) or print the
//      summary and exit 1; when every node's workers succeeded, exit 0.
// Every way the job ends in failure prints the summary (group_state.h): the
// first failure, the likely cause, and why it ended (no restarts left, the
// store gone, a rendezvous that could not re-form).
// Who hosts the store (static: node rank 0; c10d: the agent on the
// endpoint's host, else rdzv_conf is_host) waits for the others to leave
// before it exits, so that its exit is never mistaken for a failure.
#ifndef LOCKSTEP_TOOLS_LAUNCH_AGENT_H_
#define LOCKSTEP_TOOLS_LAUNCH_AGENT_H_

#include <chrono>
#include <string>
#include <vector>

#include "tools/launch/launch_flags.h"
#include "tools/launch/signal_forwarder.h"

namespace lockstep {
namespace launch {

struct AgentOptions {
  LaunchFlags flags;
  RendezvousSettings rendezvous;
  int nproc = 1;
  std::vector<std::string> worker_argv;
  bool set_omp_num_threads = false;
  // SIGTERM to SIGKILL when stopping workers (LOCKSTEP_STOP_GRACE_SECONDS).
  std::chrono::milliseconds stop_grace{5000};
};

// Runs the job on this node; returns the exit code (0 all succeeded, 1
// failed, 128 + signal when interrupted). Errors are printed to stderr.
int RunAgent(const AgentOptions& options, SignalForwarder* forwarder);

}  // namespace launch
}  // namespace lockstep

#endif  // LOCKSTEP_TOOLS_LAUNCH_AGENT_H_
