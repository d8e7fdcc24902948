// Collective benchmark in the style of nccl-tests.
//
//   bazel run --config=opt //tools/bench:collectives -- --op=all_reduce --nproc=2
//       --min_bytes=4K --max_bytes=256M --check        (one command)
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
// communicator's (other_vcsw, other_ivcsw); each the largest of any rank).
// busbw uses nccl-tests' factors: all_reduce 2(n-1)/n;
// all_gather, all_gather_v, reduce_scatter, gather, scatter and all_to_all
// (n-1)/n; broadcast and reduce 1. all_to_all moves `bytes` per rank, a
// block of bytes/n to every rank (nccl-tests' alltoall); all_gather_v gives
// rank r a block proportional to r + 1, the blocks together `bytes`. The time is the slowest rank's mean over --iters iterations after
// --warmup (algbw and busbw come from it). p50 and p95 are likewise the
// slowest rank's: each rank takes the percentiles of its own iteration
// times, then the maximum over ranks. A mean hides whether a size is
// uniformly slow or fast with a few stalls (a scheduler hiccup, a TCP
// retransmit), which the tail shows. Each rank times every iteration with
// one steady_clock read. (Pairing the ranks' i-th iterations instead would
// mislead: ranks can fall into anti-phase, one fast where the other is slow,
// seen at 4 KiB on 2 ranks as 5/45 us alternating, and every pair's maximum
// is then the slow one.)
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
#include <sys/resource.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
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
#include "core/cuda_runtime.h"
#include "core/deadline.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/status.h"

ABSL_FLAG(std::string, op, "all_reduce",
          "all_reduce, all_gather, all_gather_v, reduce_scatter, broadcast, reduce, gather, scatter, all_to_all, "
          "or send_recv (rank 0 sends to rank 1, the other ranks idle: one direction's stream)");
ABSL_FLAG(std::string, dtype, "f32", "element type: f32, f64, f16, bf16, i32, i64, u8, i8, bool");
ABSL_FLAG(std::string, reduce_op, "sum", "sum, avg, prod, min or max");
ABSL_FLAG(std::string, min_bytes, "4K", "smallest size (K, M, G suffixes: powers of 1024)");
ABSL_FLAG(std::string, max_bytes, "64M", "largest size");
ABSL_FLAG(double, step_factor, 2.0, "multiply the size by this between rows");
ABSL_FLAG(int, iters, 20, "timed iterations per size");
ABSL_FLAG(int, warmup, 5, "untimed iterations per size");
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

enum class BenchOp {
  kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce, kGather, kScatter, kSendRecv, kAllToAll, kAllGatherV,
};

absl::StatusOr<BenchOp> ParseOp(const std::string& name) {
  if (name == "all_reduce") return BenchOp::kAllReduce;
  if (name == "all_gather") return BenchOp::kAllGather;
  if (name == "reduce_scatter") return BenchOp::kReduceScatter;
  if (name == "broadcast") return BenchOp::kBroadcast;
  if (name == "reduce") return BenchOp::kReduce;
  if (name == "gather") return BenchOp::kGather;
  if (name == "scatter") return BenchOp::kScatter;
  if (name == "send_recv") return BenchOp::kSendRecv;
  if (name == "all_to_all") return BenchOp::kAllToAll;
  if (name == "all_gather_v") return BenchOp::kAllGatherV;
  return absl::InvalidArgumentError(absl::StrCat("--op=", name,
                                                 " is not a collective; use all_reduce, all_gather, all_gather_v, "
                                                 "reduce_scatter, broadcast, reduce, gather, scatter, all_to_all "
                                                 "or send_recv"));
}

double BusFactor(BenchOp op, int n) {
  switch (op) {
    case BenchOp::kAllReduce: return 2.0 * (n - 1) / n;
    case BenchOp::kBroadcast:
    case BenchOp::kReduce:
    case BenchOp::kSendRecv: return 1.0;
    default: return static_cast<double>(n - 1) / n;
  }
}

// Element i of rank r's input: a small integer, exact in every dtype.
double InputValue(int rank, int64_t i) { return static_cast<double>((i * 3 + rank) % 7); }

void Fill(const Tensor& t, int rank, int64_t offset = 0) {
  VisitDType(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double v = InputValue(rank, offset + i);
      if constexpr (std::is_same_v<T, Half>) p[i] = FloatToHalf(static_cast<float>(v));
      else if constexpr (std::is_same_v<T, BFloat16>) p[i] = FloatToBFloat16(static_cast<float>(v));
      else if constexpr (std::is_same_v<T, bool>) p[i] = static_cast<int>(v) % 2 == 1;
      else p[i] = static_cast<T>(v);
    }
  });
}

double ValueAt(const Tensor& t, int64_t i) {
  return VisitDType(t.dtype(), [&](auto tag) -> double {
    using T = typename decltype(tag)::type;
    const T v = t.data<T>()[i];
    if constexpr (std::is_same_v<T, Half>) return HalfToFloat(v);
    else if constexpr (std::is_same_v<T, BFloat16>) return BFloat16ToFloat(v);
    else return static_cast<double>(v);
  });
}

double Reduced(ReduceOp op, int n, int64_t i) {
  double acc = InputValue(0, i);
  for (int r = 1; r < n; ++r) {
    const double v = InputValue(r, i);
    if (op == ReduceOp::kSum || op == ReduceOp::kAvg) acc += v;
    if (op == ReduceOp::kProd) acc *= v;
    if (op == ReduceOp::kMin) acc = std::min(acc, v);
    if (op == ReduceOp::kMax) acc = std::max(acc, v);
  }
  return op == ReduceOp::kAvg ? acc / n : acc;
}

// The nearest-rank percentile (the smallest value with at least p% of the
// values at or below it): always one of the measured times, never an
// interpolation between two. `values` must not be empty.
double Percentile(std::vector<double> values, double p) {
  const size_t n = values.size();
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(n)));
  rank = std::min(std::max<size_t>(rank, 1), n);
  std::nth_element(values.begin(), values.begin() + (rank - 1), values.end());
  return values[rank - 1];
}

// The tail of one rank's iteration times (seconds), whose median is `p50`:
// p99, the maximum, and the stalls, iterations slower than 10 x p50: how
// many, and their excess over p50 per iteration (what they add to the mean).
struct TailFigures {
  double p99 = 0, max = 0, stall = 0, stalls = 0;
};

TailFigures TailOf(const std::vector<double>& times, double p50) {
  TailFigures tail;
  if (times.empty()) return tail;
  tail.p99 = Percentile(times, 99);
  double excess = 0;
  for (double t : times) {
    tail.max = std::max(tail.max, t);
    if (t > 10 * p50) {
      excess += t - p50;
      tail.stalls += 1;
    }
  }
  tail.stall = excess / static_cast<double>(times.size());
  return tail;
}

struct Buffers {
  Tensor input, output;
  std::vector<int64_t> counts;  // all_gather_v: every rank's block.
};

// all_gather_v's blocks: rank r's proportional to r + 1, `total` together.
std::vector<int64_t> UnevenCounts(int64_t total, int n) {
  std::vector<int64_t> counts;
  const int64_t parts = static_cast<int64_t>(n) * (n + 1) / 2;
  int64_t given = 0;
  for (int r = 0; r < n; ++r) {
    counts.push_back(r == n - 1 ? total - given : total * (r + 1) / parts);
    given += counts.back();
  }
  return counts;
}

// Input/output of `count` elements per rank (output sized for the op;
// all_gather_v: `count` elements in all).
absl::StatusOr<Buffers> MakeBuffers(BenchOp op, DType dtype, int64_t count, int n, int rank, Device device) {
  Buffers b;
  if (op == BenchOp::kAllGatherV) {
    b.counts = UnevenCounts(count, n);
    LOCKSTEP_ASSIGN_OR_RETURN(b.input, Tensor::Zeros({b.counts[rank]}, dtype, device));
    LOCKSTEP_ASSIGN_OR_RETURN(b.output, Tensor::Zeros({count}, dtype, device));
    return b;
  }
  const bool wide_out = op == BenchOp::kAllGather || op == BenchOp::kGather;
  const bool wide_in = op == BenchOp::kReduceScatter || op == BenchOp::kScatter;
  LOCKSTEP_ASSIGN_OR_RETURN(b.input, Tensor::Zeros({wide_in ? count * n : count}, dtype, device));
  LOCKSTEP_ASSIGN_OR_RETURN(b.output, Tensor::Zeros({wide_out ? count * n : count}, dtype, device));
  return b;
}

// Fills `t` (on any device) with rank `rank`'s known values.
absl::Status FillOnDevice(const Tensor& t, int rank) {
  if (!t.device().is_cuda()) {
    Fill(t, rank);
    return absl::OkStatus();
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor host, Tensor::Zeros(t.shape(), t.dtype()));
  Fill(host, rank);
  return t.CopyFrom(host);
}

// `t` itself on the CPU, or a host copy of a CUDA tensor, for checking.
absl::StatusOr<Tensor> OnHost(const Tensor& t) {
  if (!t.device().is_cuda()) return t;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor host, Tensor::Zeros(t.shape(), t.dtype()));
  LOCKSTEP_RETURN_IF_ERROR(host.CopyFrom(t));
  return host;
}

std::shared_ptr<Work> Launch(Communicator& comm, BenchOp op, const Buffers& b, ReduceOp rop, int root) {
  switch (op) {
    case BenchOp::kAllReduce: return comm.AllReduce(b.output, rop);  // In place, as torch.distributed.
    case BenchOp::kAllGather: return comm.AllGather(b.input, b.output);
    case BenchOp::kReduceScatter: return comm.ReduceScatter(b.input, b.output, rop);
    case BenchOp::kBroadcast: return comm.Broadcast(b.input, root);
    case BenchOp::kReduce: return comm.Reduce(b.input, b.output, rop, root);
    case BenchOp::kGather: return comm.Gather(b.input, b.output, root);
    case BenchOp::kScatter: return comm.Scatter(b.input, b.output, root);
    case BenchOp::kSendRecv:
      if (comm.rank() == 0) return comm.Send(b.input, 1);
      if (comm.rank() == 1) return comm.Recv(b.output, 0);
      return nullptr;  // The other ranks idle.
    case BenchOp::kAllToAll: return comm.AllToAll(b.input, b.output);
    case BenchOp::kAllGatherV: return comm.AllGatherV(b.input, b.output, b.counts);
  }
  return nullptr;
}

// Waits for what Launch started (nothing: done).
absl::Status WaitFor(const std::shared_ptr<Work>& work) { return work == nullptr ? absl::OkStatus() : work->Wait(); }

// Runs the op once on known data and counts wrong elements on this rank.
absl::StatusOr<int64_t> Check(Communicator& comm, BenchOp op, const Buffers& b, ReduceOp rop, int root, int64_t count) {
  const int n = comm.size(), r = comm.rank();
  LOCKSTEP_RETURN_IF_ERROR(FillOnDevice(b.input, r));
  if (op == BenchOp::kAllReduce) LOCKSTEP_RETURN_IF_ERROR(b.output.CopyFrom(b.input));
  LOCKSTEP_RETURN_IF_ERROR(WaitFor(Launch(comm, op, b, rop, root)));
  Buffers h;  // What came, on the host.
  LOCKSTEP_ASSIGN_OR_RETURN(h.input, OnHost(b.input));
  LOCKSTEP_ASSIGN_OR_RETURN(h.output, OnHost(b.output));
  int64_t wrong = 0;
  auto expect = [&](const Tensor& t, int64_t i, double value) { wrong += ValueAt(t, i) != value; };
  switch (op) {
    case BenchOp::kAllReduce:
      for (int64_t i = 0; i < count; ++i) expect(h.output, i, Reduced(rop, n, i));
      break;
    case BenchOp::kReduce:
      if (r == root) for (int64_t i = 0; i < count; ++i) expect(h.output, i, Reduced(rop, n, i));
      break;
    case BenchOp::kReduceScatter:
      for (int64_t i = 0; i < count; ++i) expect(h.output, i, Reduced(rop, n, r * count + i));
      break;
    case BenchOp::kBroadcast:
      for (int64_t i = 0; i < count; ++i) expect(h.input, i, InputValue(root, i));
      break;
    case BenchOp::kAllGather:
    case BenchOp::kGather:
      if (op == BenchOp::kAllGather || r == root) {
        for (int k = 0; k < n; ++k) for (int64_t i = 0; i < count; ++i) expect(h.output, k * count + i, InputValue(k, i));
      }
      break;
    case BenchOp::kScatter:
      // The root's input holds rank k's values at block k... Fill gave it its
      // own values everywhere, so rank r receives root's values r*count+i.
      for (int64_t i = 0; i < count; ++i) expect(h.output, i, InputValue(root, r * count + i));
      break;
    case BenchOp::kSendRecv:
      if (r == 1) for (int64_t i = 0; i < count; ++i) expect(h.output, i, InputValue(0, i));
      break;
    case BenchOp::kAllToAll: {
      // Block k of the output is rank k's block r: its values r*block+i.
      const int64_t block = count / n;
      for (int k = 0; k < n; ++k) {
        for (int64_t i = 0; i < block; ++i) expect(h.output, k * block + i, InputValue(k, r * block + i));
      }
      break;
    }
    case BenchOp::kAllGatherV: {
      int64_t at = 0;
      for (int k = 0; k < n; ++k) {
        for (int64_t i = 0; i < b.counts[k]; ++i) expect(h.output, at + i, InputValue(k, i));
        at += b.counts[k];
      }
      break;
    }
  }
  return wrong;
}

absl::Status RunRank(const RankEnvironment& env) {
  const int rank = env.rank, world = env.world_size;
  LOCKSTEP_ASSIGN_OR_RETURN(BenchOp op, ParseOp(absl::GetFlag(FLAGS_op)));
  LOCKSTEP_ASSIGN_OR_RETURN(DType dtype, ParseDType(absl::GetFlag(FLAGS_dtype)));
  LOCKSTEP_ASSIGN_OR_RETURN(ReduceOp rop, ParseReduceOp(absl::GetFlag(FLAGS_reduce_op)));
  LOCKSTEP_ASSIGN_OR_RETURN(int64_t min_bytes, ParseBytes(absl::GetFlag(FLAGS_min_bytes)));
  LOCKSTEP_ASSIGN_OR_RETURN(int64_t max_bytes, ParseBytes(absl::GetFlag(FLAGS_max_bytes)));
  const double step = absl::GetFlag(FLAGS_step_factor);
  if (!(step > 1.0) && min_bytes != max_bytes) return absl::InvalidArgumentError("--step_factor must be > 1");
  const int root = absl::GetFlag(FLAGS_root);
  if (root < 0 || root >= world) return absl::InvalidArgumentError(absl::StrCat("--root=", root, " is not a rank"));
  if (op == BenchOp::kAllToAll && dtype == DType::kBool) {
    return absl::InvalidArgumentError("--op=all_to_all: use a numeric dtype");
  }
  if (op == BenchOp::kSendRecv && world < 2) {
    return absl::InvalidArgumentError(absl::StrCat("--op=send_recv needs at least 2 ranks, not ", world));
  }

  TcpStoreOptions store_options;
  store_options.host = env.master_addr;
  store_options.port = env.master_port;
  store_options.is_server = rank == 0 && !env.agent_store;
  store_options.token = env.store_token;
  const int timeout_s = absl::GetFlag(FLAGS_timeout);
  if (timeout_s < 1) return absl::InvalidArgumentError(absl::StrCat("--timeout=", timeout_s, ": expected >= 1 s"));
  store_options.timeout = Milliseconds(int64_t{timeout_s} * 1000);
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TcpStore> store, TcpStore::Create(store_options));
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
  options.tcp.timeout = store_options.timeout;
  options.shm.timeout = store_options.timeout;
  if (absl::GetFlag(FLAGS_shm_slot_bytes) > 0) options.shm.slot_bytes = absl::GetFlag(FLAGS_shm_slot_bytes);
  if (absl::GetFlag(FLAGS_shm_slots) > 0) options.shm.slots = absl::GetFlag(FLAGS_shm_slots);
  options.shm.pause_microseconds = absl::GetFlag(FLAGS_shm_pause_microseconds);
  if (absl::GetFlag(FLAGS_shm_streaming_send_bytes) >= 0) {
    options.shm.streaming_send_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_shm_streaming_send_bytes));
  }
  if (absl::GetFlag(FLAGS_shm_streaming_receive_bytes) >= 0) {
    options.shm.streaming_receive_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_shm_streaming_receive_bytes));
  }
  if (absl::GetFlag(FLAGS_shm_single_copy_bytes) >= 0) {
    options.shm.single_copy_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_shm_single_copy_bytes));
  }
  if (absl::GetFlag(FLAGS_shm_single_copy_max_bytes) >= 0) {
    options.shm.single_copy_max_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_shm_single_copy_max_bytes));
  }
  options.communicator.timeout = store_options.timeout;
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
  std::shared_ptr<Store> shared(std::move(store));
  Device device = Device::Cpu();
  const std::string device_flag = absl::GetFlag(FLAGS_device);
  const int gpus = cuda::DeviceCount();
  if (device_flag == "cuda") {
    if (gpus == 0) {
      return absl::FailedPreconditionError("--device=cuda: no CUDA device is visible here; use --device=cpu");
    }
    device = Device::Cuda(env.local_rank % gpus);
  } else if (device_flag != "cpu") {
    return absl::InvalidArgumentError(absl::StrCat("--device=", device_flag, ": expected cpu or cuda"));
  }
  BackendChoiceInput choice_input;
  choice_input.requested = absl::GetFlag(FLAGS_backend);
  choice_input.environment = BackendFromEnvironment();
  choice_input.device = device;
  choice_input.nccl_version = LinkedNcclVersion();
  choice_input.visible_gpus = gpus;
  choice_input.local_world_size = env.local_world_size;
  LOCKSTEP_ASSIGN_OR_RETURN(BackendChoice choice, ChooseBackend(choice_input));
  std::unique_ptr<Communicator> comm;
  if (choice.kind == BackendKind::kNccl) {
    NcclCommunicatorOptions nccl;
    nccl.communicator = options.communicator;
    nccl.init_timeout = store_options.timeout;
    LOCKSTEP_ASSIGN_OR_RETURN(comm, CreateNcclCommunicator(shared, rank, world, device, nccl));
  } else {
    LOCKSTEP_ASSIGN_OR_RETURN(comm, CreateCommunicator(shared, rank, world, options));
  }
  const std::string transport = comm->capabilities().name;
  // Which copy path shared memory uses (single copy needs process_vm_readv
  // between the ranks): asked of a transport of its own, with the same
  // options, since the communicator hides its transport.
  std::string copy_path;
  // Only when every rank shares this host (a hierarchical group's ranks on
  // other hosts cannot join a shared-memory transport).
  if (choice.kind != BackendKind::kNccl && transport == "host over shm") {
    PrefixStore probe_store("collectives_bench/copy_path", shared);
    absl::StatusOr<std::unique_ptr<ShmTransport>> probe = ShmTransport::Create(probe_store, rank, world, options.shm);
    copy_path = probe.ok() ? (*probe)->CopyPath() : probe.status().ToString();
  }

  const bool json = absl::GetFlag(FLAGS_json);
  if (rank == 0 && !json) {
    std::printf("# lockstep collectives benchmark: op %s, dtype %s, reduce_op %s, %d ranks, transport %s\n",
                absl::GetFlag(FLAGS_op).c_str(), std::string(DTypeName(dtype)).c_str(),
                std::string(ReduceOpName(rop)).c_str(), world, transport.c_str());
    std::printf("# device %s; backend %s: %s\n", device.ToString().c_str(),
                std::string(BackendKindName(choice.kind)).c_str(), choice.reason.c_str());
    if (!copy_path.empty()) std::printf("# shared-memory copy path (rank 0): %s\n", copy_path.c_str());
    std::printf("# iters %d, warmup %d, check %s; time = slowest rank's mean; p50, p95 = the slowest rank's "
                "percentiles of its iteration times; GB/s = 1e9 bytes/s\n",
                absl::GetFlag(FLAGS_iters), absl::GetFlag(FLAGS_warmup), absl::GetFlag(FLAGS_check) ? "on" : "off");
    std::printf("#%12s %12s %6s %12s %10s %10s %12s %12s %8s\n", "bytes", "count", "type", "time(us)", "p50(us)",
                "p95(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
    std::fflush(stdout);  // The group is up: say so now, not after the first size.
  }
  const int64_t element = static_cast<int64_t>(DTypeSize(dtype));
  const bool per_rank_count = op == BenchOp::kAllGather || op == BenchOp::kGather ||
                              op == BenchOp::kReduceScatter || op == BenchOp::kScatter;
  for (double size = static_cast<double>(min_bytes); size <= static_cast<double>(max_bytes) * 1.0000001;
       size = size * step) {
    const int64_t bytes = static_cast<int64_t>(size);
    // Like nccl-tests, `bytes` is the whole buffer; gathered/scattered ops
    // move count = bytes / (n * element) per rank.
    int64_t count = per_rank_count ? bytes / (element * world) : bytes / element;
    if (op == BenchOp::kAllToAll) count = count / world * world;  // Whole blocks.
    LOCKSTEP_ASSIGN_OR_RETURN(Buffers buffers, MakeBuffers(op, dtype, count, world, rank, device));
    for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) {
      LOCKSTEP_RETURN_IF_ERROR(WaitFor(Launch(*comm, op, buffers, rop, root)));
    }
    LOCKSTEP_RETURN_IF_ERROR(comm->Barrier()->Wait());
    const int iters = std::max(1, absl::GetFlag(FLAGS_iters));
    // times[0]: this rank's mean; times[1 + i]: iteration i. Sized before the
    // loop so that the loop does not allocate. One clock read per iteration:
    // iteration i ends where i + 1 starts, so the per-iteration times add up
    // to the loop's time and their mean is the mean reported.
    std::vector<double> times(1 + iters);
    rusage caller_before{}, process_before{};
    ::getrusage(RUSAGE_THREAD, &caller_before);
    ::getrusage(RUSAGE_SELF, &process_before);
    const auto start = std::chrono::steady_clock::now();
    auto previous = start;
    for (int i = 0; i < iters; ++i) {
      LOCKSTEP_RETURN_IF_ERROR(WaitFor(Launch(*comm, op, buffers, rop, root)));
      const auto now = std::chrono::steady_clock::now();
      times[1 + i] = std::chrono::duration<double>(now - previous).count();
      previous = now;
    }
    times[0] = std::chrono::duration<double>(previous - start).count() / iters;
    rusage caller_after{}, process_after{};
    ::getrusage(RUSAGE_THREAD, &caller_after);
    ::getrusage(RUSAGE_SELF, &process_after);
    const std::vector<double> per_iteration(times.begin() + 1, times.end());
    const double p50_mine = Percentile(per_iteration, 50);
    const TailFigures tail = TailOf(per_iteration, p50_mine);
    const double caller_vcsw = static_cast<double>(caller_after.ru_nvcsw - caller_before.ru_nvcsw);
    const double caller_ivcsw = static_cast<double>(caller_after.ru_nivcsw - caller_before.ru_nivcsw);
    const double other_vcsw =
        static_cast<double>(process_after.ru_nvcsw - process_before.ru_nvcsw) - caller_vcsw;
    const double other_ivcsw =
        static_cast<double>(process_after.ru_nivcsw - process_before.ru_nivcsw) - caller_ivcsw;
    // MAX over ranks: the slowest rank's mean, p50 and p95 (nccl-tests
    // reports the slowest rank).
    // And the largest peak RSS of any rank so far (sizes grow, so: at this
    // size), in MiB.
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor slowest, Tensor::FromVector<double>(std::vector<double>{
                                                  times[0], p50_mine,
                                                  Percentile(per_iteration, 95),
                                                  static_cast<double>(usage.ru_maxrss) / 1024, tail.p99,
                                                  tail.max, tail.stall, tail.stalls, caller_vcsw, caller_ivcsw,
                                                  other_vcsw, other_ivcsw}));
    LOCKSTEP_RETURN_IF_ERROR(comm->AllReduce(slowest, ReduceOp::kMax)->Wait());
    int64_t wrong = -1;
    if (absl::GetFlag(FLAGS_check)) {
      LOCKSTEP_ASSIGN_OR_RETURN(int64_t mine, Check(*comm, op, buffers, rop, root, count));
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor total, Tensor::FromVector<int64_t>(std::vector<int64_t>{mine}));
      LOCKSTEP_RETURN_IF_ERROR(comm->AllReduce(total, ReduceOp::kSum)->Wait());
      wrong = total.data<int64_t>()[0];
    }
    if (rank == 0) {
      const double t = slowest.data<double>()[0];
      const double p50 = slowest.data<double>()[1];
      const double p95 = slowest.data<double>()[2];
      const int64_t total_bytes = per_rank_count ? count * element * world : count * element;
      const double algbw = total_bytes / t / 1e9;
      const double busbw = algbw * BusFactor(op, world);
      const std::string wrong_text = wrong < 0 ? "N/A" : absl::StrCat(wrong);
      if (json) {
        std::printf("{\"op\": \"%s\", \"dtype\": \"%s\", \"ranks\": %d, \"transport\": \"%s\", "
                    "\"bytes\": %lld, \"count\": %lld, "
                    "\"time_us\": %.3f, \"p50_us\": %.3f, \"p95_us\": %.3f, \"algbw_gbps\": %.4f, "
                    "\"busbw_gbps\": %.4f, \"wrong\": %lld, \"peak_rss_mib\": %.1f, \"p99_us\": %.3f, "
                    "\"max_us\": %.3f, \"stall_us\": %.4f, \"stalls\": %.0f, \"caller_vcsw\": %.0f, "
                    "\"caller_ivcsw\": %.0f, \"other_vcsw\": %.0f, \"other_ivcsw\": %.0f}\n",
                    absl::GetFlag(FLAGS_op).c_str(), std::string(DTypeName(dtype)).c_str(), world,
                    transport.c_str(), static_cast<long long>(total_bytes), static_cast<long long>(count), t * 1e6,
                    p50 * 1e6, p95 * 1e6, algbw, busbw, static_cast<long long>(wrong), slowest.data<double>()[3],
                    slowest.data<double>()[4] * 1e6, slowest.data<double>()[5] * 1e6,
                    slowest.data<double>()[6] * 1e6, slowest.data<double>()[7], slowest.data<double>()[8],
                    slowest.data<double>()[9], slowest.data<double>()[10], slowest.data<double>()[11]);
      } else {
        std::printf(" %12lld %12lld %6s %12.2f %10.2f %10.2f %12.3f %12.3f %8s\n", static_cast<long long>(total_bytes),
                    static_cast<long long>(count), std::string(DTypeName(dtype)).c_str(), t * 1e6, p50 * 1e6,
                    p95 * 1e6, algbw, busbw, wrong_text.c_str());
      }
      std::fflush(stdout);
    }
    if (wrong > 0) return absl::DataLossError(absl::StrCat(wrong, " wrong elements at ", bytes, " bytes"));
    if (size * step <= size) break;
  }
  return comm->Barrier()->Wait();
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
