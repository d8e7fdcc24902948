// A subgroup and an all-to-all from outside: four ranks (this program again)
// build a communicator through the public factory, exchange uneven blocks
// with AllToAllV, split into even and odd ranks and all-reduce in each half.
// Run without arguments: it starts the store and the ranks and prints rank
// 0's results.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "collectives/bootstrap/communicator_factory.h"
#include "collectives/communicator.h"
#include "collectives/store/tcp_store.h"
#include "core/status.h"
#include "core/subprocess.h"
#include "core/tensor.h"

namespace {

constexpr int kRanks = 4;

absl::Status RunRank(int rank, int port) {
  using namespace lockstep;
  TcpStoreOptions store_options;
  store_options.port = port;
  store_options.timeout = Milliseconds(30000);
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TcpStore> store, TcpStore::Create(store_options));
  CommunicatorFactoryOptions options;
  options.communicator.timeout = Milliseconds(30000);
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                            CreateCommunicator(std::move(store), rank, kRanks, options));
  // Rank r sends j + 1 copies of 10 * r + j to rank j.
  std::vector<int64_t> send_counts, recv_counts;
  std::vector<int32_t> send;
  for (int j = 0; j < kRanks; ++j) {
    send_counts.push_back(j + 1);
    recv_counts.push_back(rank + 1);
    for (int k = 0; k <= j; ++k) send.push_back(10 * rank + j);
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor in, Tensor::FromVector<int32_t>(send));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros({kRanks * (rank + 1)}, DType::kI32));
  LOCKSTEP_RETURN_IF_ERROR(comm->AllToAllV(in, out, send_counts, recv_counts)->Wait());
  // Even and odd ranks, renumbered from 0 in each half.
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> half, comm->Split(rank % 2, rank));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor sum, Tensor::FromVector<int32_t>({rank}));
  LOCKSTEP_RETURN_IF_ERROR(half->AllReduce(sum, ReduceOp::kSum)->Wait());
  if (rank == 0) {
    LOCKSTEP_ASSIGN_OR_RETURN(std::vector<int32_t> received, out.ToVector<int32_t>());
    std::printf("received");
    for (int32_t v : received) std::printf(" %d", v);
    std::printf("\nhalf: rank %d of %d, sum %d\n", half->rank(), half->size(), sum.data<int32_t>()[0]);
  }
  return comm->Barrier()->Wait();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3) {
    const absl::Status s = RunRank(std::atoi(argv[1]), std::atoi(argv[2]));
    if (!s.ok()) std::fprintf(stderr, "rank %s: %s\n", argv[1], s.ToString().c_str());
    return s.ok() ? 0 : 1;
  }
  lockstep::TcpStoreServerOptions server_options;
  server_options.host = "127.0.0.1";
  auto server = lockstep::TcpStoreServer::Start(server_options);
  if (!server.ok()) return std::fprintf(stderr, "%s\n", server.status().ToString().c_str()), 1;
  std::vector<lockstep::Subprocess> ranks;
  for (int rank = 0; rank < kRanks; ++rank) {
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
