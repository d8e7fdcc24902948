// Local launch: runs N ranks of a program on this machine under a rendezvous
// store this process holds, with torchrun's environment, as `torchrun
// --standalone --nproc_per_node=N` does; the ranks then join the group with
// InitFromEnv (collectives/bootstrap/init_from_env.h).
//
//   LocalLaunchOptions options;
//   options.nproc = 2;
//   options.argv = {"/proc/self/exe", "--epochs=3"};   // each rank's command line
//   LOCKSTEP_RETURN_IF_ERROR(RunLocalRanks(options));   // waits for all
//
// Each rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
// MASTER_ADDR=127.0.0.1, MASTER_PORT (the store's), LOCKSTEP_STORE_TOKEN (a
// fresh random secret: no stray process can join) and
// TORCHELASTIC_USE_AGENT_STORE=True (the store already runs here, so no rank
// binds a port chosen in advance). The store listens on port 0 and stays
// bound while the ranks run, so no other process can take the port between
// choosing and using it.
//
// With bind_to_core each rank runs on its own CPU (mpirun's --bind-to core),
// when there are enough CPUs: the scheduler then never stacks two ranks on
// one CPU while another idles. The first rank that fails stops the others
// (they would only wait for it until their timeouts), as torchrun does.
#ifndef LOCKSTEP_COLLECTIVES_BOOTSTRAP_LOCAL_LAUNCH_H_
#define LOCKSTEP_COLLECTIVES_BOOTSTRAP_LOCAL_LAUNCH_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace lockstep {

struct LocalLaunchOptions {
  int nproc = 1;
  std::vector<std::string> argv;  // argv[0]: the program (not searched on PATH).
  bool bind_to_core = true;
  std::string name = "launch";  // For messages.
};

// OK when every rank exited with status 0; otherwise an error naming the
// first rank that failed and how.
absl::Status RunLocalRanks(const LocalLaunchOptions& options);

// 32 hex digits from getrandom(2) ("" if it fails: then no token is used).
std::string RandomStoreToken();

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_BOOTSTRAP_LOCAL_LAUNCH_H_
