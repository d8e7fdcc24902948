// Two ranks sum a vector with the ring all-reduce, using single collectives
// targets from outside (a store, the TCP transport, one algorithm) and no
// Communicator. Run without arguments: it starts the store and two ranks
// (itself again) and prints rank 0's result.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "collectives/algorithms/algorithm.h"
#include "collectives/algorithms/ring_all_reduce.h"
#include "collectives/store/tcp_store.h"
#include "collectives/transport/tcp/tcp_transport.h"
#include "core/subprocess.h"
#include "core/tensor.h"

namespace {

int RunRank(int rank, int port) {
  using namespace lockstep;
  TcpStoreOptions store_options;
  store_options.port = port;
  store_options.timeout = Milliseconds(30000);
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Create(store_options);
  if (!store.ok()) return std::fprintf(stderr, "%s\n", store.status().ToString().c_str()), 1;
  absl::StatusOr<std::unique_ptr<TcpTransport>> transport = TcpTransport::Create(**store, rank, 2, {});
  if (!transport.ok()) return std::fprintf(stderr, "%s\n", transport.status().ToString().c_str()), 1;
  // 100000 elements: the ring path, pipelined in segments.
  std::vector<float> values(100000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((rank + 1) * (i % 10));
  Tensor buffer = *Tensor::FromVector<float>(values);
  AlgorithmContext ctx{**transport, /*seq=*/0, 0, DeadlineIn(Milliseconds(30000))};
  if (absl::Status s = RingAllReduce(ctx, buffer, ReduceOp::kSum); !s.ok()) {
    return std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str()), 1;
  }
  if (rank == 0) {
    const float* p = buffer.data<float>();
    std::printf("%g %g %g %g\n", p[0], p[1], p[9], p[99999]);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3) return RunRank(std::atoi(argv[1]), std::atoi(argv[2]));
  lockstep::TcpStoreServerOptions server_options;
  server_options.host = "127.0.0.1";
  auto server = lockstep::TcpStoreServer::Start(server_options);
  if (!server.ok()) return std::fprintf(stderr, "%s\n", server.status().ToString().c_str()), 1;
  std::vector<lockstep::Subprocess> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    lockstep::SubprocessOptions options;
    options.argv = {"/proc/self/exe", std::to_string(rank), std::to_string((*server)->port())};
    options.alarm_seconds = 60;
    absl::StatusOr<lockstep::Subprocess> child = lockstep::Subprocess::Spawn(options);
    if (!child.ok()) return std::fprintf(stderr, "%s\n", child.status().ToString().c_str()), 1;
    ranks.push_back(std::move(*child));
  }
  int failed = 0;
  for (lockstep::Subprocess& child : ranks) {
    absl::StatusOr<lockstep::ExitStatus> status = child.Wait();
    if (!status.ok() || !status->success()) ++failed;
  }
  return failed == 0 ? 0 : 1;
}
