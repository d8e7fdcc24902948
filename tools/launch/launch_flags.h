// LaunchFlags: lockstep-run's command line, which is torchrun's (PyTorch
// 1.13, plus the dash spellings of 2.x).
//
//   LOCKSTEP_ASSIGN_OR_RETURN(LaunchFlags flags, ParseLaunchFlags(args, GetEnv));
//   if (flags.help) { std::cout << LaunchUsage(); return 0; }
//   LOCKSTEP_ASSIGN_OR_RETURN(int nproc, ResolveNprocPerNode(flags.nproc_per_node, cpus, gpus));
//
// Rules, as torchrun's argparse parser:
// - `--flag value` and `--flag=value`; every `--a_b` also as `--a-b`; short
//   `-m` (--module), `-r` (--redirects), `-t` (--tee), `-h` (--help); a
//   unique prefix of a long flag stands for it (argparse's abbreviations).
// - Each flag's default comes from PET_<FLAG> when set (PET_NPROC_PER_NODE,
//   PET_NNODES, PET_MASTER_ADDR, ...; PET_STANDALONE=1 for switches).
// - The first argument that is not a flag (or the one after `--`) is the
//   program; everything after it is the program's, untouched.
//
// Why not absl flags: absl keeps parsing flags after the first positional
// argument, so `lockstep-run prog --lr 0.1` would try to take --lr itself.
// The program's arguments must pass through untouched, hence this parser.
#ifndef LOCKSTEP_TOOLS_LAUNCH_LAUNCH_FLAGS_H_
#define LOCKSTEP_TOOLS_LAUNCH_LAUNCH_FLAGS_H_

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {
namespace launch {

// Which of a worker's streams go to a log file: torchrun's Std (0 none,
// 1 stdout, 2 stderr, 3 both).
enum StdStreams : int { kStdNone = 0, kStdOut = 1, kStdErr = 2, kStdAll = 3 };

// `--redirects` / `--tee`: one value for every local rank ("3") or a map
// per local rank ("0:1,1:2"; ranks not named get 0), as torchrun.
struct StreamSpec {
  int all = kStdNone;
  std::map<int, int> per_rank;  // Non-empty for the map form.
  int For(int local_rank) const;
};
absl::StatusOr<StreamSpec> ParseStreamSpec(absl::string_view flag, absl::string_view text);

struct LaunchFlags {
  bool help = false;
  int min_nodes = 1;
  int max_nodes = 1;
  std::string nproc_per_node = "1";  // number, "cpu", "gpu" or "auto".
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string rdzv_backend = "static";  // "static", "c10d", "etcd" or "etcd-v2" (the same here).
  std::string rdzv_endpoint;            // host[:port] (etcd: a comma list); "" = master_addr:master_port (static).
  std::string rdzv_id = "none";
  std::map<std::string, std::string> rdzv_conf;
  bool standalone = false;
  bool fault_tolerant = false;  // Restart a lost worker alone; the others go on.
  int max_restarts = 0;
  double monitor_interval_s = 5;
  std::string start_method = "spawn";  // Accepted for compatibility; workers are always exec'd.
  std::string role = "default";
  bool module = false;
  bool no_python = false;
  bool run_path = false;
  std::string log_dir;  // "" = none.
  StreamSpec redirects;
  StreamSpec tee;
  std::string program;
  std::vector<std::string> program_args;
  // Non-fatal remarks for stderr (a token on the command line, unknown
  // rdzv_conf keys).
  std::vector<std::string> warnings;
};

using GetEnvFn = std::function<std::optional<std::string>(const std::string& name)>;

// Parses the arguments after argv[0]. Errors name the flag and point at --help.
absl::StatusOr<LaunchFlags> ParseLaunchFlags(const std::vector<std::string>& args, const GetEnvFn& getenv);

// The number of workers per node for --nproc_per_node: a positive number,
// "cpu" (the CPUs), "gpu" (the GPUs; an error without one) or "auto" (the
// GPUs if any, else the CPUs), as torchrun.
absl::StatusOr<int> ResolveNprocPerNode(absl::string_view text, int cpu_count, int gpu_count);

// The rendezvous settings that --rdzv_conf, the environment and the other
// flags make up, checked.
struct RendezvousSettings {
  std::string backend;  // "static", "c10d" or "etcd" (etcd-v2 resolves to etcd).
  std::string host;     // Where the rendezvous store is.
  int port = 0;         // 0: pick a free one (--standalone).
  std::string run_id;
  std::chrono::milliseconds join_timeout{900000};      // rdzv_conf timeout / join_timeout.
  std::chrono::milliseconds last_call_timeout{30000};  // rdzv_conf last_call_timeout.
  std::chrono::milliseconds read_timeout{60000};       // rdzv_conf read_timeout: one store call.
  std::chrono::milliseconds heartbeat_timeout{30000};  // rdzv_conf heartbeat_timeout.
  std::optional<bool> is_host;                         // rdzv_conf is_host (c10d).
  std::string token;                                   // join_token, join_token_file or LOCKSTEP_RDZV_TOKEN; "" = none.
  // etcd: every endpoint as host:port (the first is also host/port above)
  // and rdzv_conf's TLS files and key prefix, torchrun's names (etcd:
  // protocol, cacert, cert, key, etcd_prefix; etcd-v2: ca_cert, ssl_cert,
  // ssl_cert_key).
  std::vector<std::string> etcd_endpoints;
  std::string etcd_protocol = "http";
  std::string etcd_ca_cert;
  std::string etcd_cert;
  std::string etcd_key;
  std::string etcd_prefix = "/lockstep-run";
};
absl::StatusOr<RendezvousSettings> ResolveRendezvous(const LaunchFlags& flags, const GetEnvFn& getenv,
                                                     std::vector<std::string>* warnings);

// torchrun-like usage text for --help.
std::string LaunchUsage();

}  // namespace launch
}  // namespace lockstep

#endif  // LOCKSTEP_TOOLS_LAUNCH_LAUNCH_FLAGS_H_
