// A small all-reduce benchmark for the shared-memory transport (and TCP, to
// compare): N local ranks, one per CPU, f32 SUM through the Communicator.
//
//   bazel run -c opt //collectives:shm_bench -- --nproc=2 --sizes=4096,67108864
//
// For each size: `samples` timed blocks of iterations after a warm-up; each
// block's time is the slowest rank's (nccl-tests' convention). Prints the
// median and the range of the per-op time and busbw (2(n-1)/n x bytes / time).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "collectives/bootstrap/local_launch.h"
#include "collectives/bootstrap/shm_communicator.h"
#include "collectives/bootstrap/tcp_communicator.h"
#include "collectives/store/prefix_store.h"
#include "collectives/store/tcp_store.h"

namespace lockstep {
namespace {

struct Flags {
  int nproc = 2;
  std::vector<int64_t> sizes = {4096, 65536, 1 << 20, 16 << 20, 64 << 20};
  int samples = 7;
  double seconds_per_sample = 0.2;
  std::string transport = "shm";
  // allreduce, or sendrecv (rank 0 sends to rank 1: the one-way stream).
  std::string op = "allreduce";
  ShmTransportOptions shm;
  size_t segment_bytes = AlgorithmOptions().segment_bytes;
  CommunicatorOptions communicator;
};

bool Parse(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) return false;
    const std::string key = arg.substr(2, eq - 2), value = arg.substr(eq + 1);
    int64_t v = 0;
    if (key == "transport" || key == "op") {
      (key == "op" ? f->op : f->transport) = value;
      continue;
    }
    if (key == "sizes") {
      f->sizes.clear();
      for (absl::string_view s : absl::StrSplit(value, ',')) {
        if (!absl::SimpleAtoi(s, &v) || v < 4) return false;
        f->sizes.push_back(v);
      }
      continue;
    }
    if (key == "seconds_per_sample") {
      if (!absl::SimpleAtod(value, &f->seconds_per_sample)) return false;
      continue;
    }
    if (!absl::SimpleAtoi(value, &v)) return false;
    if (key == "nproc") f->nproc = static_cast<int>(v);
    else if (key == "samples") f->samples = static_cast<int>(v);
    else if (key == "slot_bytes") f->shm.slot_bytes = static_cast<size_t>(v);
    else if (key == "slots") f->shm.slots = static_cast<int>(v);
    else if (key == "spin_us") f->shm.spin_microseconds = static_cast<int>(v);
    else if (key == "segment_bytes") f->segment_bytes = static_cast<size_t>(v);
    else if (key == "worker_spin_us") f->communicator.worker_spin_microseconds = static_cast<int>(v);
    else if (key == "wait_spin_us") f->communicator.wait_spin_microseconds = static_cast<int>(v);
    else if (key == "streaming_send_bytes") f->shm.streaming_send_bytes = static_cast<size_t>(v);
    else if (key == "streaming_receive_bytes") f->shm.streaming_receive_bytes = static_cast<size_t>(v);
    else if (key == "single_copy_bytes") f->shm.single_copy_bytes = static_cast<size_t>(v);
    else if (key == "single_copy_max_bytes") f->shm.single_copy_max_bytes = static_cast<size_t>(v);
    else return false;
  }
  return true;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int RunRank(const Flags& flags) {
  const int rank = std::atoi(std::getenv("RANK"));
  const int size = std::atoi(std::getenv("WORLD_SIZE"));
  TcpStoreOptions store_options;
  store_options.host = "127.0.0.1";
  store_options.port = std::atoi(std::getenv("MASTER_PORT"));
  if (const char* token = std::getenv("LOCKSTEP_STORE_TOKEN")) store_options.token = token;
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Create(store_options);
  if (!store.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, store.status().ToString().c_str());
    return 1;
  }
  std::shared_ptr<Store> shared = std::move(*store);
  absl::StatusOr<std::unique_ptr<Communicator>> comm;
  std::string copy_path;
  if (flags.transport == "shm") {
    // Which copy path the group uses (single copy needs process_vm_readv
    // between the ranks): a transport of its own, with the same options.
    PrefixStore probe_store("shm_bench_probe", shared);
    absl::StatusOr<std::unique_ptr<ShmTransport>> probe = ShmTransport::Create(probe_store, rank, size, flags.shm);
    copy_path = probe.ok() ? (*probe)->CopyPath() : probe.status().ToString();
    ShmCommunicatorOptions options;
    options.communicator = flags.communicator;
    options.transport = flags.shm;
    options.algorithms.segment_bytes = flags.segment_bytes;
    comm = CreateShmCommunicator(shared, rank, size, options);
  } else {
    TcpCommunicatorOptions options;
    options.communicator = flags.communicator;
    options.algorithms.segment_bytes = flags.segment_bytes;
    comm = CreateTcpCommunicator(shared, rank, size, options);
  }
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, comm.status().ToString().c_str());
    return 1;
  }
  Communicator& c = **comm;
  const bool sendrecv = flags.op == "sendrecv";
  auto run_op = [&](const Tensor& t) -> absl::Status {
    if (!sendrecv) return c.AllReduce(t, ReduceOp::kSum)->Wait();
    if (rank == 0) return c.Send(t, 1)->Wait();
    if (rank == 1) return c.Recv(t, 0)->Wait();
    return absl::OkStatus();
  };
  if (rank == 0) {
    std::printf("# %s, %d ranks, transport %s, slot_bytes %zu, slots %d, spin_us %d, segment_bytes %zu\n", flags.op.c_str(), size,
                flags.transport.c_str(), flags.shm.slot_bytes, flags.shm.slots, flags.shm.spin_microseconds,
                flags.segment_bytes);
    if (flags.transport == "shm") std::printf("# copy path (rank 0): %s\n", copy_path.c_str());
    std::printf("%12s %10s %12s %12s %12s %12s\n", "bytes", "iters", "time_us_med", "time_us_min", "busbw_GB/s",
                "busbw_max");
  }
  for (int64_t bytes : flags.sizes) {
    const int64_t count = bytes / 4;
    Tensor t = *Tensor::Zeros({count}, DType::kF32);
    Tensor timing = *Tensor::Zeros({1}, DType::kF64);
    // Warm-up (the same count on every rank), and an iteration count for
    // about seconds_per_sample.
    const int warm = bytes >= (16 << 20) ? 5 : 200;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < warm; ++i) {
      if (auto s = run_op(t); !s.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
        return 1;
      }
    }
    timing.data<double>()[0] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / warm;
    (void)c.AllReduce(timing, ReduceOp::kMax)->Wait();
    const int iters = std::max<int>(3, static_cast<int>(flags.seconds_per_sample / timing.data<double>()[0]));
    std::vector<double> per_op;
    for (int sample = 0; sample < flags.samples; ++sample) {
      (void)c.Barrier()->Wait();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) {
        if (auto s = run_op(t); !s.ok()) {
          std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
          return 1;
        }
      }
      timing.data<double>()[0] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      (void)c.AllReduce(timing, ReduceOp::kMax)->Wait();
      per_op.push_back(timing.data<double>()[0] / iters);
    }
    const double factor = sendrecv ? 1.0 : 2.0 * (size - 1) / size;
    const double med = Median(per_op);
    const double best = *std::min_element(per_op.begin(), per_op.end());
    if (rank == 0) {
      std::printf("%12lld %10d %12.2f %12.2f %12.3f %12.3f\n", static_cast<long long>(bytes), iters, med * 1e6,
                  best * 1e6, factor * bytes / med / 1e9, factor * bytes / best / 1e9);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  lockstep::Flags flags;
  if (!lockstep::Parse(argc, argv, &flags)) {
    std::fprintf(stderr,
                 "usage: shm_bench [--nproc=2] [--sizes=4096,67108864] [--samples=7] [--seconds_per_sample=0.2] "
                 "[--transport=shm|tcp] [--op=allreduce|sendrecv] [--slot_bytes=N] [--slots=N] [--spin_us=N] [--segment_bytes=N] [--worker_spin_us=N] [--wait_spin_us=N] [--streaming_send_bytes=N] [--streaming_receive_bytes=N] [--single_copy_bytes=N (0: ring only)] [--single_copy_max_bytes=N]\n");
    return 2;
  }
  if (std::getenv("RANK") != nullptr) return lockstep::RunRank(flags);
  lockstep::LocalLaunchOptions options;
  options.nproc = flags.nproc;
  options.argv.push_back("/proc/self/exe");
  for (int i = 1; i < argc; ++i) options.argv.push_back(argv[i]);
  options.name = "shm_bench";
  const absl::Status s = lockstep::RunLocalRanks(options);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
