// Collective benchmark in the style of nccl-tests.
//
//   bazel run --config=opt //tools/bench:collectives -- --op=all_reduce --nproc=2
//       --min_bytes=4K --max_bytes=256M --check        (one command)
//
// As nccl-tests is built: one descriptor per collective (tools/bench/ops/,
// listed in ops/registry.h: sizes, busbw factor, fill, launch, check) and
// one driver (driver.h: the sweep, warm-up, timing, percentiles, --check,
// table and JSON). This file parses the flags and sets up the group.
//
// With --nproc=N it hosts the store itself and starts N local ranks (this
// binary again, with torchrun's variables and TORCHELASTIC_USE_AGENT_STORE);
// the first rank to fail stops the others. Without it, it joins the group
// its launcher describes (torchrun, mpirun or srun; see
// collectives/bootstrap/rank_environment.h): rank 0 hosts the store at
// MASTER_ADDR:MASTER_PORT unless a launcher already does. Rank 0 prints one
// row per size: bytes, count, type, time (us), p50 (us), p95 (us), algbw
// (GB/s), busbw (GB/s), #wrong (--json: the same as fields, peak_rss_mib (the
// largest rank's peak RSS so far), p50_us and p95_us
// beside time_us, and where the tail comes from: p99_us, max_us, stall_us
// (the mean's share of stalls: the excess over p50 of iterations slower
// than 10 x p50, per iteration), stalls (how many), and the context
// switches during the timed loop, voluntary and not, of the calling
// thread (caller_vcsw, caller_ivcsw) and of the rank's other threads, its
// communicator's (other_vcsw, other_ivcsw); each the largest of any rank),
// and what the group costs to have: setup_s (process start to the end of
// the first collective) and fds (open descriptors after the size), each the
// largest of any rank.
// busbw uses nccl-tests' factors: all_reduce 2(n-1)/n;
// all_gather, all_gather_v, reduce_scatter, gather, scatter and all_to_all
// (n-1)/n; broadcast and reduce 1. all_to_all moves `bytes` per rank, a
// block of bytes/n to every rank (nccl-tests' alltoall); all_gather_v gives
// rank r a block proportional to r + 1, the blocks together `bytes`. The
// time is the slowest rank's mean over --iters iterations after --warmup
// (algbw and busbw come from it). p50 and p95 are likewise the slowest
// rank's: each rank takes the percentiles of its own iteration times, then
// the maximum over ranks. A mean hides whether a size is uniformly slow or
// fast with a few stalls (a scheduler hiccup, a TCP retransmit), which the
// tail shows (driver.h says how the iterations are timed).
//
// Shared memory's options have flags of their own (--shm_*), and the header
// says which copy path it uses; --op=send_recv times one direction's stream
// (rank 0 to rank 1), the transport's raw throughput.
//
// --transport=auto (the default) lets the ranks choose from their host
// identities (collectives/bootstrap/communicator_factory.h): shared memory on one
// host, TCP with one rank per host, hierarchical otherwise; tcp or shm
// forces one (LOCKSTEP_TRANSPORT too, when the flag is auto). The header
// line and every JSON row name the transport that ran ("host over shm",
// "host over tcp", "hierarchical(shm+tcp)").
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "collectives/bootstrap/backend_choice.h"
#include "collectives/bootstrap/communicator_factory.h"
#include "collectives/bootstrap/local_launch.h"
#include "collectives/bootstrap/rank_environment.h"
#include "collectives/communicator.h"
#include "collectives/nccl/nccl_communicator.h"
#include "collectives/store/prefix_store.h"
#include "collectives/store/tcp_store.h"
#include "collectives/transport/shm/shm_transport.h"
#include "collectives/transport/tcp/address.h"
#include "core/cuda/cuda_runtime.h"
#include "core/deadline.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/status.h"
#include "tools/bench/driver.h"
#include "tools/bench/ops/registry.h"

ABSL_FLAG(std::string, op, "all_reduce",
          "all_reduce, all_gather, all_gather_v, reduce_scatter, broadcast, reduce, gather, scatter, all_to_all, "
          "or send_recv (rank 0 sends to rank 1, the other ranks idle: one direction's stream); a comma-separated "
          "list sweeps each in turn on one group");
ABSL_FLAG(std::string, dtype, "f32", "element type: f32, f64, f16, bf16, i32, i64, u8, i8, bool");
ABSL_FLAG(std::string, reduce_op, "sum", "sum, avg, prod, min or max");
ABSL_FLAG(std::string, min_bytes, "4K", "smallest size (K, M, G suffixes: powers of 1024)");
ABSL_FLAG(std::string, max_bytes, "64M", "largest size");
ABSL_FLAG(double, step_factor, 2.0, "multiply the size by this between rows");
ABSL_FLAG(int, iters, 20, "timed iterations per size");
ABSL_FLAG(int, warmup, 5, "untimed iterations per size");
ABSL_FLAG(std::string, large_bytes, "0",
          "sizes above this run --iters_large and --warmup_large iterations instead (0: every size the same)");
ABSL_FLAG(int, iters_large, 3, "timed iterations per size above --large_bytes");
ABSL_FLAG(int, warmup_large, 1, "untimed iterations per size above --large_bytes");
ABSL_FLAG(int, nproc, 0, "start this many local ranks (0: join the group in the environment)");
ABSL_FLAG(bool, check, false, "verify every result and count wrong elements");
ABSL_FLAG(bool, json, false, "print JSON lines instead of the table");
ABSL_FLAG(int, root, 0, "root rank of rooted ops");
ABSL_FLAG(int64_t, small_message_bytes, -1, "AlgorithmOptions::small_message_bytes");
ABSL_FLAG(int64_t, segment_bytes, -1, "AlgorithmOptions::segment_bytes");
ABSL_FLAG(int64_t, socket_buffer_bytes, -1, "TcpTransportOptions::socket_buffer_bytes (0: kernel autotuning)");
ABSL_FLAG(std::string, bind_to, "core",
          "with --nproc: core binds local rank i to the i-th CPU this process may use (as mpirun does for "
          "up to one rank per core; nothing is bound when there are more ranks than CPUs), none leaves "
          "placement to the scheduler");
ABSL_FLAG(int, worker_spin_microseconds, -1, "CommunicatorOptions::worker_spin_microseconds");
ABSL_FLAG(int, flight_recorder_entries, -1, "CommunicatorOptions::flight_recorder_entries (0: off)");
ABSL_FLAG(int, wait_spin_microseconds, -1, "CommunicatorOptions::wait_spin_microseconds");
ABSL_FLAG(int, transport_spin_microseconds, -1, "TcpTransportOptions::spin_microseconds");
ABSL_FLAG(std::string, tcp_congestion_control, "cubic", "TcpTransportOptions::congestion_control (\"\": the system's)");
ABSL_FLAG(std::string, host, "",
          "address other ranks reach this one at (default: LOCKSTEP_SOCKET_ADDR, LOCKSTEP_SOCKET_IFNAME, else the "
          "route toward MASTER_ADDR; never loopback when the ranks span hosts)");
ABSL_FLAG(std::string, transport, "auto",
          "auto (shared memory between ranks of one host, TCP between hosts, hierarchical for mixed groups), "
          "tcp or shm; LOCKSTEP_TRANSPORT applies when this is auto");
ABSL_FLAG(int64_t, shm_slot_bytes, -1, "ShmTransportOptions::slot_bytes");
ABSL_FLAG(int, shm_pause_microseconds, -1, "ShmTransportOptions::pause_microseconds (-1: chosen by the CPUs)");
ABSL_FLAG(int, shm_slots, -1, "ShmTransportOptions::slots");
ABSL_FLAG(int64_t, shm_streaming_send_bytes, -1, "ShmTransportOptions::streaming_send_bytes");
ABSL_FLAG(int64_t, shm_streaming_receive_bytes, -1, "ShmTransportOptions::streaming_receive_bytes");
ABSL_FLAG(int64_t, shm_single_copy_bytes, -1, "ShmTransportOptions::single_copy_bytes (0: ring only)");
ABSL_FLAG(int64_t, shm_single_copy_max_bytes, -1, "ShmTransportOptions::single_copy_max_bytes");
ABSL_FLAG(std::string, device, "cpu",
          "cpu, or cuda: CUDA tensors on this rank's GPU (cuda:(LOCAL_RANK % visible GPUs))");
ABSL_FLAG(std::string, backend, "auto",
          "auto, host or nccl (auto: LOCKSTEP_BACKEND, else NCCL for CUDA tensors with one rank per GPU; "
          "collectives/bootstrap/backend_choice.h)");
ABSL_FLAG(int, timeout, 300, "seconds an operation (and the group's setup) may take before it fails");

namespace lockstep {
namespace {

using bench::CollectiveDescriptor;
using bench::SweepOptions;

absl::StatusOr<int64_t> ParseBytes(const std::string& text) {
  int64_t scale = 1;
  std::string digits = text;
  if (!digits.empty()) {
    const char suffix = static_cast<char>(std::toupper(digits.back()));
    if (suffix == 'K' || suffix == 'M' || suffix == 'G') {
      scale = suffix == 'K' ? 1 << 10 : suffix == 'M' ? 1 << 20 : int64_t{1} << 30;
      digits.pop_back();
    }
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(digits, &value) || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a size such as 4096, 4K, 64M or 1G"));
  }
  return value * scale;
}

// The sweep's flags, checked (the device is chosen later, with the group).
absl::StatusOr<SweepOptions> SweepOptionsFromFlags(const CollectiveDescriptor& op, int world) {
  SweepOptions o;
  LOCKSTEP_ASSIGN_OR_RETURN(o.dtype, ParseDType(absl::GetFlag(FLAGS_dtype)));
  LOCKSTEP_ASSIGN_OR_RETURN(o.args.reduce_op, ParseReduceOp(absl::GetFlag(FLAGS_reduce_op)));
  LOCKSTEP_ASSIGN_OR_RETURN(o.min_bytes, ParseBytes(absl::GetFlag(FLAGS_min_bytes)));
  LOCKSTEP_ASSIGN_OR_RETURN(o.max_bytes, ParseBytes(absl::GetFlag(FLAGS_max_bytes)));
  o.step_factor = absl::GetFlag(FLAGS_step_factor);
  if (!(o.step_factor > 1.0) && o.min_bytes != o.max_bytes) {
    return absl::InvalidArgumentError("--step_factor must be > 1");
  }
  o.args.root = absl::GetFlag(FLAGS_root);
  if (o.args.root < 0 || o.args.root >= world) {
    return absl::InvalidArgumentError(absl::StrCat("--root=", o.args.root, " is not a rank"));
  }
  if (op.validate != nullptr) LOCKSTEP_RETURN_IF_ERROR(op.validate(o.dtype, world));
  o.iters = absl::GetFlag(FLAGS_iters);
  o.warmup = absl::GetFlag(FLAGS_warmup);
  LOCKSTEP_ASSIGN_OR_RETURN(o.large_bytes, ParseBytes(absl::GetFlag(FLAGS_large_bytes)));
  o.iters_large = absl::GetFlag(FLAGS_iters_large);
  o.warmup_large = absl::GetFlag(FLAGS_warmup_large);
  if (o.iters < 1 || o.iters_large < 1 || o.warmup < 0 || o.warmup_large < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--iters=", o.iters, ", --iters_large=", o.iters_large,
                                                   ", --warmup=", o.warmup, ", --warmup_large=", o.warmup_large,
                                                   ": expected at least 1 timed and 0 untimed iterations"));
  }
  o.check = absl::GetFlag(FLAGS_check);
  o.json = absl::GetFlag(FLAGS_json);
  return o;
}

// The store's options for this rank; --timeout bounds every wait.
absl::StatusOr<TcpStoreOptions> StoreOptions(const RankEnvironment& env) {
  TcpStoreOptions store;
  store.host = env.master_addr;
  store.port = env.master_port;
  store.is_server = env.rank == 0 && !env.agent_store;
  store.token = env.store_token;
  const int timeout_s = absl::GetFlag(FLAGS_timeout);
  if (timeout_s < 1) return absl::InvalidArgumentError(absl::StrCat("--timeout=", timeout_s, ": expected >= 1 s"));
  store.timeout = Milliseconds(int64_t{timeout_s} * 1000);
  return store;
}

// Shared memory's flags (-1, or 0 for the sizes, leave the default).
void ApplyShmFlags(ShmTransportOptions& shm) {
  if (absl::GetFlag(FLAGS_shm_slot_bytes) > 0) shm.slot_bytes = absl::GetFlag(FLAGS_shm_slot_bytes);
  if (absl::GetFlag(FLAGS_shm_slots) > 0) shm.slots = absl::GetFlag(FLAGS_shm_slots);
  shm.pause_microseconds = absl::GetFlag(FLAGS_shm_pause_microseconds);
  if (absl::GetFlag(FLAGS_shm_streaming_send_bytes) >= 0) {
    shm.streaming_send_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_shm_streaming_send_bytes));
  }
  if (absl::GetFlag(FLAGS_shm_streaming_receive_bytes) >= 0) {
    shm.streaming_receive_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_shm_streaming_receive_bytes));
  }
  if (absl::GetFlag(FLAGS_shm_single_copy_bytes) >= 0) {
    shm.single_copy_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_shm_single_copy_bytes));
  }
  if (absl::GetFlag(FLAGS_shm_single_copy_max_bytes) >= 0) {
    shm.single_copy_max_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_shm_single_copy_max_bytes));
  }
}

// The algorithms', TCP's and the communicator's flags (-1: the default).
void ApplyTuningFlags(CommunicatorFactoryOptions& options) {
  if (absl::GetFlag(FLAGS_small_message_bytes) >= 0) {
    options.algorithms.small_message_bytes = absl::GetFlag(FLAGS_small_message_bytes);
  }
  if (absl::GetFlag(FLAGS_segment_bytes) > 0) options.algorithms.segment_bytes = absl::GetFlag(FLAGS_segment_bytes);
  if (absl::GetFlag(FLAGS_socket_buffer_bytes) >= 0) {
    options.tcp.socket_buffer_bytes = static_cast<int>(absl::GetFlag(FLAGS_socket_buffer_bytes));
  }
  options.tcp.congestion_control = absl::GetFlag(FLAGS_tcp_congestion_control);
  if (absl::GetFlag(FLAGS_worker_spin_microseconds) >= 0) {
    options.communicator.worker_spin_microseconds = absl::GetFlag(FLAGS_worker_spin_microseconds);
  }
  if (absl::GetFlag(FLAGS_flight_recorder_entries) >= 0) {
    options.communicator.flight_recorder_entries = absl::GetFlag(FLAGS_flight_recorder_entries);
  }
  if (absl::GetFlag(FLAGS_wait_spin_microseconds) >= 0) {
    options.communicator.wait_spin_microseconds = absl::GetFlag(FLAGS_wait_spin_microseconds);
  }
  if (absl::GetFlag(FLAGS_transport_spin_microseconds) >= 0) {
    options.tcp.spin_microseconds = absl::GetFlag(FLAGS_transport_spin_microseconds);
    options.shm.spin_microseconds = absl::GetFlag(FLAGS_transport_spin_microseconds);
  }
}

// The host communicator's options from the flags and the environment.
absl::StatusOr<CommunicatorFactoryOptions> FactoryOptions(const RankEnvironment& env, const TcpStoreOptions& store) {
  CommunicatorFactoryOptions options;
  options.transport = absl::GetFlag(FLAGS_transport);
  if (options.transport != "auto" && options.transport != "tcp" && options.transport != "shm") {
    return absl::InvalidArgumentError(absl::StrCat("--transport=", options.transport, ": expected auto, tcp or shm"));
  }
  LOCKSTEP_RETURN_IF_ERROR(
      ApplyTransportEnvironment([](const char* name) -> const char* { return std::getenv(name); }, &options));
  AddressSelection selection;
  selection.master_addr = env.master_addr;
  selection.spans_hosts = env.world_size > env.local_world_size;
  selection.host = absl::GetFlag(FLAGS_host);
  ApplyAddressEnvironment(&selection);
  LOCKSTEP_ASSIGN_OR_RETURN(options.tcp.host, ChooseLocalAddress(selection));
  options.tcp.secret = env.store_token;
  options.tcp.timeout = store.timeout;
  options.shm.timeout = store.timeout;
  ApplyShmFlags(options.shm);
  options.communicator.timeout = store.timeout;
  ApplyTuningFlags(options);
  return options;
}

// --device: the CPU, or this rank's GPU.
absl::StatusOr<Device> DeviceFromFlag(const RankEnvironment& env, int gpus) {
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device == "cpu") return Device::Cpu();
  if (device != "cuda") return absl::InvalidArgumentError(absl::StrCat("--device=", device, ": expected cpu or cuda"));
  if (gpus == 0) {
    return absl::FailedPreconditionError("--device=cuda: no CUDA device is visible here; use --device=cpu");
  }
  return Device::Cuda(env.local_rank % gpus);
}

struct Group {
  std::unique_ptr<Communicator> comm;
  BackendKind backend = BackendKind::kHost;
  bench::RunInfo info;
};

// The communicator --backend chooses: NCCL, or the host's.
absl::StatusOr<Group> Connect(const RankEnvironment& env, std::shared_ptr<Store> store,
                              const CommunicatorFactoryOptions& options, const TcpStoreOptions& store_options,
                              Device device, int gpus) {
  BackendChoiceInput choice_input;
  choice_input.requested = absl::GetFlag(FLAGS_backend);
  choice_input.environment = BackendFromEnvironment();
  choice_input.device = device;
  choice_input.nccl_version = LinkedNcclVersion();
  choice_input.visible_gpus = gpus;
  choice_input.local_world_size = env.local_world_size;
  LOCKSTEP_ASSIGN_OR_RETURN(BackendChoice choice, ChooseBackend(choice_input));
  Group group;
  if (choice.kind == BackendKind::kNccl) {
    NcclCommunicatorOptions nccl;
    nccl.communicator = options.communicator;
    nccl.init_timeout = store_options.timeout;
    LOCKSTEP_ASSIGN_OR_RETURN(group.comm, CreateNcclCommunicator(store, env.rank, env.world_size, device, nccl));
  } else {
    LOCKSTEP_ASSIGN_OR_RETURN(group.comm, CreateCommunicator(store, env.rank, env.world_size, options));
  }
  group.backend = choice.kind;
  group.info.world = env.world_size;
  group.info.transport = group.comm->capabilities().name;
  group.info.backend = std::string(BackendKindName(choice.kind));
  group.info.backend_reason = choice.reason;
  return group;
}

// Which copy path shared memory uses (single copy needs process_vm_readv
// between the ranks): asked of a transport of its own, with the same
// options, since the communicator hides its transport. Empty unless the
// host backend runs over shared memory alone (a hierarchical group's ranks
// on other hosts cannot join a shared-memory transport).
std::string CopyPath(std::shared_ptr<Store> store, const RankEnvironment& env, const ShmTransportOptions& shm,
                     const std::string& transport) {
  if (transport != "host over shm") return "";
  PrefixStore probe_store("collectives_bench/copy_path", store);
  absl::StatusOr<std::unique_ptr<ShmTransport>> probe =
      ShmTransport::Create(probe_store, env.rank, env.world_size, shm);
  return probe.ok() ? (*probe)->CopyPath() : probe.status().ToString();
}

// --op's collectives, in order: one name, or several separated by commas.
absl::StatusOr<std::vector<const CollectiveDescriptor*>> OpsFromFlag() {
  const std::string flag = absl::GetFlag(FLAGS_op);
  std::vector<const CollectiveDescriptor*> ops;
  for (absl::string_view name : absl::StrSplit(flag, ',')) {
    if (name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--op=", flag, ": an empty name; give one op, or several separated by single commas"));
    }
    LOCKSTEP_ASSIGN_OR_RETURN(const CollectiveDescriptor* op, bench::FindCollective(std::string(name)));
    ops.push_back(op);
  }
  return ops;
}

absl::Status RunRank(const RankEnvironment& env) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<const CollectiveDescriptor*> ops, OpsFromFlag());
  std::vector<SweepOptions> sweeps;
  for (const CollectiveDescriptor* op : ops) {
    LOCKSTEP_ASSIGN_OR_RETURN(SweepOptions sweep, SweepOptionsFromFlags(*op, env.world_size));
    sweeps.push_back(sweep);
  }
  LOCKSTEP_ASSIGN_OR_RETURN(TcpStoreOptions store_options, StoreOptions(env));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TcpStore> tcp_store, TcpStore::Create(store_options));
  LOCKSTEP_ASSIGN_OR_RETURN(CommunicatorFactoryOptions options, FactoryOptions(env, store_options));
  std::shared_ptr<Store> store(std::move(tcp_store));
  const int gpus = cuda::DeviceCount();
  LOCKSTEP_ASSIGN_OR_RETURN(const Device device, DeviceFromFlag(env, gpus));
  LOCKSTEP_ASSIGN_OR_RETURN(Group group, Connect(env, store, options, store_options, device, gpus));
  if (group.backend != BackendKind::kNccl) {
    group.info.copy_path = CopyPath(store, env, options.shm, group.info.transport);
  }
  LOCKSTEP_ASSIGN_OR_RETURN(const double setup_s, bench::MeasureSetup(*group.comm));
  for (size_t k = 0; k < ops.size(); ++k) {
    sweeps[k].device = device;
    if (env.rank == 0 && !sweeps[k].json) {
      if (k > 0) std::printf("\n");
      bench::PrintHeader(*ops[k], sweeps[k], group.info);
      bench::PrintAlgorithms(*group.comm, *ops[k], sweeps[k]);
    }
    LOCKSTEP_RETURN_IF_ERROR(bench::RunSweep(*group.comm, *ops[k], sweeps[k], group.info.transport, setup_s));
  }
  return absl::OkStatus();
}

// --nproc: this binary again as the ranks, under a store this process holds
// (collectives/bootstrap/local_launch.h).
int SpawnLocal(int nproc, char** argv) {
  const std::string bind_to = absl::GetFlag(FLAGS_bind_to);
  if (bind_to != "core" && bind_to != "none") {
    std::fprintf(stderr, "collectives: --bind_to=%s: expected core or none\n", bind_to.c_str());
    return 2;
  }
  LocalLaunchOptions options;
  options.nproc = nproc;
  options.name = "collectives";
  options.bind_to_core = bind_to == "core";
  options.argv = {"/proc/self/exe"};
  for (char** a = argv + 1; *a != nullptr; ++a) {
    if (std::string(*a).rfind("--nproc", 0) != 0) options.argv.push_back(*a);
  }
  options.argv.push_back("--nproc=0");
  if (absl::Status s = RunLocalRanks(options); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  const int nproc = absl::GetFlag(FLAGS_nproc);
  if (nproc > 0) return lockstep::SpawnLocal(nproc, argv);
  const absl::StatusOr<lockstep::RankEnvironment> env = lockstep::RankEnvironmentFromEnv();
  if (!env.ok()) {
    std::fprintf(stderr, "collectives: give --nproc=N to start N local ranks, or start it under a launcher: %s\n",
                 std::string(env.status().message()).c_str());
    return 2;
  }
  const absl::Status s = lockstep::RunRank(*env);
  if (!s.ok()) {
    std::fprintf(stderr, "collectives: rank %d: %s\n", env->rank, s.ToString().c_str());
    return 1;
  }
  return 0;
}
