// lockstep-run: torchrun's command line for any program. See launch_flags.h
// for the flags, agent.h for what each node's agent does, and --help.
// Exit codes: 0 every worker succeeded; 1 the job failed (summary printed);
// 2 bad command line or program (argparse's code); 128 + N after signal N.
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "core/cuda/cuda_runtime.h"
#include "tools/launch/agent.h"
#include "tools/launch/launch_flags.h"
#include "tools/launch/signal_forwarder.h"
#include "tools/launch/worker_command.h"
#include "tools/launch/worker_env.h"
#include "tools/launch/worker_guard.h"

namespace {

std::optional<std::string> GetEnv(const std::string& name) {
  const char* value = ::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace lockstep::launch;
  // Started by an agent to lead one worker's process group.
  if (argc >= 2 && IsWorkerGuard(argv[1])) return RunWorkerGuard(argc, argv);
  // Before any thread: the forwarder blocks the signals it forwards in every
  // thread started after it.
  SignalForwarder forwarder;
  // Workers make their own store (rank 0 serves it): a value inherited from
  // an enclosing launcher must not reach them.
  ::unsetenv("TORCHELASTIC_USE_AGENT_STORE");

  const std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<LaunchFlags> flags = ParseLaunchFlags(args, GetEnv);
  if (!flags.ok()) {
    std::cerr << flags.status().message() << std::endl;
    return 2;
  }
  if (flags->help) {
    std::cout << LaunchUsage();
    return 0;
  }
  std::vector<std::string> warnings = flags->warnings;
  absl::StatusOr<RendezvousSettings> rendezvous = ResolveRendezvous(*flags, GetEnv, &warnings);
  if (!rendezvous.ok()) {
    std::cerr << rendezvous.status().message() << std::endl;
    return 2;
  }
  // The join token is the agents' alone: workers get their own token
  // (LOCKSTEP_STORE_TOKEN), never the one that opens the rendezvous store.
  ::unsetenv("LOCKSTEP_RDZV_TOKEN");
  if (rendezvous->token.empty() && flags->max_nodes > 1 && GetEnv("LOCKSTEP_REQUIRE_TOKEN").value_or("") == "1") {
    std::cerr << "lockstep-run: LOCKSTEP_REQUIRE_TOKEN=1 but this job of up to " << flags->max_nodes
              << " nodes has no join token; give every agent the same one (LOCKSTEP_RDZV_TOKEN or --rdzv_conf "
                 "join_token_file=PATH)"
              << std::endl;
    return 2;
  }
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  const int gpus =
      flags->nproc_per_node == "gpu" || flags->nproc_per_node == "auto" ? lockstep::cuda::DeviceCount() : 0;
  absl::StatusOr<int> nproc = ResolveNprocPerNode(flags->nproc_per_node, static_cast<int>(cpus), gpus);
  if (!nproc.ok()) {
    std::cerr << nproc.status().message() << std::endl;
    return 2;
  }
  absl::StatusOr<std::vector<std::string>> command = WorkerCommand(*flags, GetEnv);
  if (!command.ok()) {
    std::cerr << command.status().message() << std::endl;
    return 2;
  }
  AgentOptions options;
  if (std::optional<std::string> grace = GetEnv("LOCKSTEP_STOP_GRACE_SECONDS"); grace.has_value()) {
    char* end = nullptr;
    const double seconds = std::strtod(grace->c_str(), &end);
    if (grace->empty() || end == nullptr || *end != '\0' || !std::isfinite(seconds) || seconds < 0 || seconds > 86400) {
      std::cerr << "lockstep-run: LOCKSTEP_STOP_GRACE_SECONDS='" << *grace
                << "' is not a number of seconds in 0..86400 (the SIGTERM to SIGKILL grace period; default 5)"
                << std::endl;
      return 2;
    }
    options.stop_grace = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  }
  options.flags = *flags;
  options.rendezvous = *rendezvous;
  options.nproc = *nproc;
  options.worker_argv = *command;
  options.set_omp_num_threads = *nproc > 1 && !GetEnv("OMP_NUM_THREADS").has_value();
  for (const std::string& w : warnings) std::cerr << "[lockstep-run] warning: " << w << std::endl;
  if (options.set_omp_num_threads) {
    std::cerr << "*****************************************\n"
              << kOmpWarning << "\n*****************************************" << std::endl;
  }
  return RunAgent(options, &forwarder);
}
