// The usage examples of the collectives' public headers (stores, transports,
// algorithms, communicators, buckets), compiled and run with threads as ranks
// over an in-process HashStore and loopback TCP or shared memory. Each
// example's lines appear below exactly as in its header (checked by
// //tests:header_examples_check); lines in between set up its inputs or check
// its results. Where an example names an address of a real cluster, a line
// after it points the test at this machine instead.
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/algorithms/algorithm.h"
#include "collectives/algorithms/all_reduce.h"
#include "collectives/algorithms/all_to_all.h"
#include "collectives/algorithms/broadcast.h"
#include "collectives/algorithms/bruck_all_gather.h"
#include "collectives/algorithms/bruck_all_to_all.h"
#include "collectives/algorithms/pipelined_tree.h"
#include "collectives/algorithms/pipelined_tree_broadcast.h"
#include "collectives/algorithms/pipelined_tree_reduce.h"
#include "collectives/algorithms/rabenseifner_all_reduce.h"
#include "collectives/algorithms/recursive_halving_reduce_scatter.h"
#include "collectives/algorithms/reduce.h"
#include "collectives/algorithms/tree_all_reduce.h"
#include "ddp/bucket_assignment.h"
#include "collectives/communicator.h"
#include "collectives/elastic/elastic_group.h"
#include "collectives/flight_recorder.h"
#include "ddp/fused_all_reduce.h"
#include "ddp/grad_bucket.h"
#include "collectives/hierarchical/hierarchical_backend.h"
#include "collectives/host_backend.h"
#include "collectives/nccl/nccl_communicator.h"
#include "collectives/store/file_store.h"
#include "collectives/store/hash_store.h"
#include "collectives/store/prefix_store.h"
#include "collectives/store/store.h"
#include "collectives/store/tcp_store.h"
#include "collectives/testing/group.h"
#include "collectives/transport/host_identity.h"
#include "collectives/transport/shm/shm_transport.h"
#include "collectives/transport/tcp/tcp_transport.h"
#include "collectives/transport/transport.h"
#include "collectives/work.h"
#include "collectives/work_promise.h"
#include "collectives/monitored_barrier.h"
#include "core/cuda/cuda_runtime.h"
#include "core/deadline.h"
#include "core/device.h"
#include "core/reduce_op.h"
#include "core/status.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

// Runs fn(rank) on `size` threads; one status per rank.
std::vector<absl::Status> RunRanks(int size, const std::function<absl::Status(int rank)>& fn) {
  std::vector<absl::Status> results(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] { results[rank] = fn(rank); });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

void ExpectAllOk(const std::vector<absl::Status>& results) {
  for (size_t rank = 0; rank < results.size(); ++rank) EXPECT_TRUE(results[rank].ok()) << rank << ": " << results[rank];
}

std::vector<float> Values(const Tensor& t) { return *t.ToVector<float>(); }

// rank r's data: {r + 1, 2 (r + 1), ..., n (r + 1)}.
Tensor RankData(int rank, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((i + 1) * (rank + 1));
  return *Tensor::FromVector<float>(v);
}

// The sum over `size` ranks of RankData, times `factor`.
std::vector<float> Summed(int size, int64_t n, float factor = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = factor * static_cast<float>((i + 1) * size * (size + 1) / 2);
  return v;
}

// collectives/algorithms/all_reduce.h: the algorithm straight on a transport.
absl::Status AllReduceExample(Transport& transport, const Tensor& buffer) {
  const uint64_t seq = 0;
  const Deadline deadline = DeadlineIn(std::chrono::seconds(60));
  AlgorithmContext ctx{transport, seq, 0, deadline};
  LOCKSTEP_RETURN_IF_ERROR(AllReduce(ctx, buffer, ReduceOp::kSum));
  return absl::OkStatus();
}

// collectives/transport/tcp/tcp_transport.h
absl::StatusOr<std::unique_ptr<Transport>> TcpTransportExample(Store& store, int rank, int world_size) {
  TcpTransportOptions options;
  options.host = "10.0.0.2";   // the address the other ranks reach this one at
  options.host = "127.0.0.1";  // (the test: this machine)
  LOCKSTEP_ASSIGN_OR_RETURN(auto transport,
      TcpTransport::Create(store, rank, world_size, options));
  return std::unique_ptr<Transport>(std::move(transport));
}

// collectives/transport/shm/shm_transport.h
absl::StatusOr<std::unique_ptr<Transport>> ShmTransportExample(Store& store, int rank, int world_size) {
  ShmTransportOptions options;   // defaults suit two ranks on two cores
  LOCKSTEP_ASSIGN_OR_RETURN(auto transport,
      ShmTransport::Create(store, rank, world_size, options));
  return std::unique_ptr<Transport>(std::move(transport));
}

using TransportFactory = std::function<absl::StatusOr<std::unique_ptr<Transport>>(Store&, int, int)>;

void AllReduceOver(const TransportFactory& make) {
  HashStore store;
  std::vector<Tensor> buffers = {RankData(0, 1000), RankData(1, 1000)};
  ExpectAllOk(RunRanks(2, [&](int rank) -> absl::Status {
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, make(store, rank, 2));
    if (transport->rank() != rank || transport->size() != 2) return absl::InternalError("rank or size");
    return AllReduceExample(*transport, buffers[rank]);
  }));
  EXPECT_EQ(Values(buffers[0]), Summed(2, 1000));
  EXPECT_EQ(Values(buffers[1]), Summed(2, 1000));
}

TEST(CollectivesExamplesTest, AllReduceOverATcpTransport) { AllReduceOver(TcpTransportExample); }

// collectives/algorithms/rabenseifner_all_reduce.h
absl::Status RabenseifnerExample(Transport& transport, const Tensor& buffer) {
  const uint64_t seq = 0;
  const Deadline deadline = DeadlineIn(std::chrono::seconds(60));
  AlgorithmContext ctx{transport, seq, 0, deadline};
  LOCKSTEP_RETURN_IF_ERROR(RabenseifnerAllReduce(ctx, buffer, ReduceOp::kSum));
  return absl::OkStatus();
}

// collectives/algorithms/bruck_all_gather.h
absl::Status BruckExample(Transport& transport, const Tensor& buffer) {
  const uint64_t seq = 0;
  const Deadline deadline = DeadlineIn(std::chrono::seconds(60));
  AlgorithmContext ctx{transport, seq, 0, deadline};
  // Block r of `buffer` holds this rank's data; afterwards every block
  // holds its rank's.
  LOCKSTEP_RETURN_IF_ERROR(BruckAllGather(ctx, buffer));
  return absl::OkStatus();
}

// collectives/algorithms/recursive_halving_reduce_scatter.h
absl::Status RecursiveHalvingExample(Transport& transport, const Tensor& input, const Tensor& buffer) {
  const uint64_t seq = 0;
  const Deadline deadline = DeadlineIn(std::chrono::seconds(60));
  AlgorithmContext ctx{transport, seq, 0, deadline};
  LOCKSTEP_RETURN_IF_ERROR(RecursiveHalvingReduceScatter(ctx, input, buffer, ReduceOp::kSum));
  // chunk r of `buffer` (ChunkOf) holds op over every rank's chunk r of `input`.
  return absl::OkStatus();
}

TEST(CollectivesExamplesTest, LogarithmicAlgorithmsOverTcpAtThreeRanks) {
  HashStore store;
  constexpr int kRanks = 3;
  constexpr int64_t kCount = 300;  // 100 a rank.
  std::vector<Tensor> sums, gathered, inputs, scattered;
  for (int r = 0; r < kRanks; ++r) {
    sums.push_back(RankData(r, kCount));
    inputs.push_back(RankData(r, kCount));
    scattered.push_back(*Tensor::Zeros({kCount}, DType::kF32));
    gathered.push_back(*Tensor::Zeros({kCount}, DType::kF32));
    for (int64_t i = r * 100; i < (r + 1) * 100; ++i) gathered[r].data<float>()[i] = static_cast<float>(r * 1000 + i);
  }
  ExpectAllOk(RunRanks(kRanks, [&](int rank) -> absl::Status {
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, TcpTransportExample(store, rank, kRanks));
    LOCKSTEP_RETURN_IF_ERROR(RabenseifnerExample(*transport, sums[rank]));
    LOCKSTEP_RETURN_IF_ERROR(BruckExample(*transport, gathered[rank]));
    return RecursiveHalvingExample(*transport, inputs[rank], scattered[rank]);
  }));
  const std::vector<float> want = Summed(kRanks, kCount);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(Values(sums[r]), want) << "rank " << r;
    for (int64_t i = 0; i < kCount; ++i) {
      EXPECT_EQ(gathered[r].data<float>()[i], static_cast<float>((i / 100) * 1000 + i)) << "rank " << r << ", " << i;
    }
    for (int64_t i = r * 100; i < (r + 1) * 100; ++i) {
      EXPECT_EQ(scattered[r].data<float>()[i], want[static_cast<size_t>(i)]) << "rank " << r << ", " << i;
    }
  }
}

// collectives/algorithms/pipelined_tree.h
TEST(CollectivesExamplesTest, PipelinedTreeChoice) {
  const LinkConstants link = LinkConstantsFor("tcp");
  const int chunks = PipelinedTreeChunks(link, 64 << 20, 8, 16 << 20, /*reduce=*/false);
  const bool pipelined = UsePipelinedTree(AllReduceAlgorithm::kAuto, link, 64 << 20, 16 << 20, 8, false);
  EXPECT_GT(chunks, 1);
  EXPECT_TRUE(pipelined);
}

// collectives/algorithms/pipelined_tree_broadcast.h
absl::Status PipelinedTreeBroadcastExample(Transport& transport, uint64_t seq, const Tensor& buffer) {
  const Deadline deadline = DeadlineIn(std::chrono::seconds(60));
  AlgorithmContext ctx{transport, seq, 0, deadline};
  const int chunks = PipelinedTreeChunks(ctx.link, buffer.nbytes(), ctx.size(), buffer.numel(), false);
  LOCKSTEP_RETURN_IF_ERROR(PipelinedTreeBroadcast(ctx, buffer, /*root=*/0, chunks));
  return absl::OkStatus();
}

// collectives/algorithms/pipelined_tree_reduce.h
absl::Status PipelinedTreeReduceExample(Transport& transport, uint64_t seq, const Tensor& input,
                                        const Tensor& output) {
  const Deadline deadline = DeadlineIn(std::chrono::seconds(60));
  AlgorithmContext ctx{transport, seq, 0, deadline};
  const int chunks = PipelinedTreeChunks(ctx.link, input.nbytes(), ctx.size(), input.numel(), true);
  LOCKSTEP_RETURN_IF_ERROR(PipelinedTreeReduce(ctx, input, output, ReduceOp::kSum, /*root=*/0, chunks));
  return absl::OkStatus();
}

// collectives/algorithms/tree_all_reduce.h
absl::Status TreeAllReduceExample(Transport& transport, uint64_t seq, const Tensor& buffer) {
  const Deadline deadline = DeadlineIn(std::chrono::seconds(60));
  AlgorithmContext ctx{transport, seq, 0, deadline};
  LOCKSTEP_RETURN_IF_ERROR(TreeAllReduce(ctx, buffer, ReduceOp::kSum));
  return absl::OkStatus();
}

// collectives/algorithms/broadcast.h
absl::Status BroadcastFromExample(Transport& transport, uint64_t seq, const Tensor& buffer) {
  const Deadline deadline = DeadlineIn(std::chrono::seconds(60));
  AlgorithmContext ctx{transport, seq, 0, deadline};
  LOCKSTEP_RETURN_IF_ERROR(BroadcastFrom(ctx, buffer, /*root=*/0));
  return absl::OkStatus();
}

// collectives/algorithms/reduce.h
absl::Status ReduceToExample(Transport& transport, uint64_t seq, const Tensor& input, const Tensor& output) {
  const Deadline deadline = DeadlineIn(std::chrono::seconds(60));
  AlgorithmContext ctx{transport, seq, 0, deadline};
  LOCKSTEP_RETURN_IF_ERROR(ReduceTo(ctx, input, output, ReduceOp::kSum, /*root=*/0));
  return absl::OkStatus();
}

TEST(CollectivesExamplesTest, TreesOverTcpAtFiveRanks) {
  HashStore store;
  constexpr int kRanks = 5;
  constexpr int64_t kCount = 3000;
  std::vector<Tensor> sums, inputs, reduced, reduced_to, broadcast, broadcast_from;
  for (int r = 0; r < kRanks; ++r) {
    sums.push_back(RankData(r, kCount));
    inputs.push_back(RankData(r, kCount));
    reduced.push_back(*Tensor::Zeros({kCount}, DType::kF32));
    reduced_to.push_back(*Tensor::Zeros({kCount}, DType::kF32));
    broadcast.push_back(r == 0 ? RankData(0, kCount) : *Tensor::Zeros({kCount}, DType::kF32));
    broadcast_from.push_back(r == 0 ? RankData(0, kCount) : *Tensor::Zeros({kCount}, DType::kF32));
  }
  ExpectAllOk(RunRanks(kRanks, [&](int rank) -> absl::Status {
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, TcpTransportExample(store, rank, kRanks));
    LOCKSTEP_RETURN_IF_ERROR(TreeAllReduceExample(*transport, 1, sums[rank]));
    LOCKSTEP_RETURN_IF_ERROR(PipelinedTreeReduceExample(*transport, 2, inputs[rank], reduced[rank]));
    LOCKSTEP_RETURN_IF_ERROR(ReduceToExample(*transport, 3, inputs[rank], reduced_to[rank]));
    LOCKSTEP_RETURN_IF_ERROR(PipelinedTreeBroadcastExample(*transport, 4, broadcast[rank]));
    return BroadcastFromExample(*transport, 5, broadcast_from[rank]);
  }));
  const std::vector<float> want = Summed(kRanks, kCount);
  EXPECT_EQ(Values(reduced[0]), want);
  EXPECT_EQ(Values(reduced_to[0]), want);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(Values(sums[r]), want) << "rank " << r;
    EXPECT_EQ(Values(inputs[r]), Values(RankData(r, kCount))) << "rank " << r;
    EXPECT_EQ(Values(broadcast[r]), Values(RankData(0, kCount))) << "rank " << r;
    EXPECT_EQ(Values(broadcast_from[r]), Values(RankData(0, kCount))) << "rank " << r;
  }
}

// collectives/algorithms/all_to_all.h
absl::Status AllToAllExample(Transport& transport, const Tensor& input, const Tensor& output,
                             const std::vector<int64_t>& send_counts, const std::vector<int64_t>& recv_counts) {
  const uint64_t seq = 0;
  const Deadline deadline = DeadlineIn(std::chrono::seconds(60));
  // Rank r sends send_counts[j] elements to rank j and gets recv_counts[i]
  // from rank i (the peers' send_counts[r]):
  AlgorithmContext ctx{transport, seq, 0, deadline};
  const std::vector<Chunk> send = BlocksOf(send_counts), recv = BlocksOf(recv_counts);
  LOCKSTEP_RETURN_IF_ERROR(PairwiseAllToAll(ctx, input, send, output, recv));
  return absl::OkStatus();
}

// collectives/algorithms/bruck_all_to_all.h
absl::Status BruckAllToAllExample(Transport& transport, const Tensor& input, const Tensor& output, int64_t block) {
  const uint64_t seq = 0;
  const Deadline deadline = DeadlineIn(std::chrono::seconds(60));
  AlgorithmContext ctx{transport, seq, 0, deadline};
  // input and output: p blocks of `block` elements each.
  LOCKSTEP_RETURN_IF_ERROR(BruckAllToAll(ctx, input, output, block));
  return absl::OkStatus();
}

TEST(CollectivesExamplesTest, BruckAllToAllOverTcpAtThreeRanks) {
  HashStore store;
  constexpr int kRanks = 3;
  constexpr int64_t kBlock = 4;
  std::vector<Tensor> inputs, outputs;
  for (int r = 0; r < kRanks; ++r) {
    inputs.push_back(*Tensor::Empty({kRanks * kBlock}, DType::kF32));
    for (int64_t i = 0; i < kRanks * kBlock; ++i) inputs[r].data<float>()[i] = static_cast<float>(r * 100 + i);
    outputs.push_back(*Tensor::Zeros({kRanks * kBlock}, DType::kF32));
  }
  ExpectAllOk(RunRanks(kRanks, [&](int rank) -> absl::Status {
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, TcpTransportExample(store, rank, kRanks));
    return BruckAllToAllExample(*transport, inputs[rank], outputs[rank], kBlock);
  }));
  // Block i of rank r's output: block r of rank i's input.
  for (int r = 0; r < kRanks; ++r) {
    for (int i = 0; i < kRanks; ++i) {
      for (int64_t k = 0; k < kBlock; ++k) {
        EXPECT_EQ(outputs[r].data<float>()[i * kBlock + k], static_cast<float>(i * 100 + r * kBlock + k))
            << "rank " << r << ", block " << i;
      }
    }
  }
}

TEST(CollectivesExamplesTest, UnevenAllToAllOverATcpTransport) {
  HashStore store;
  // Rank 0 keeps 1 element and sends 2 to rank 1; rank 1 sends 3 to rank 0 and keeps none.
  const std::vector<std::vector<int64_t>> send_counts = {{1, 2}, {3, 0}}, recv_counts = {{1, 3}, {2, 0}};
  std::vector<Tensor> inputs = {*Tensor::FromVector<float>({1, 2, 3}), *Tensor::FromVector<float>({4, 5, 6})};
  std::vector<Tensor> outputs = {*Tensor::Zeros({4}, DType::kF32), *Tensor::Zeros({2}, DType::kF32)};
  ExpectAllOk(RunRanks(2, [&](int rank) -> absl::Status {
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, TcpTransportExample(store, rank, 2));
    return AllToAllExample(*transport, inputs[rank], outputs[rank], send_counts[rank], recv_counts[rank]);
  }));
  EXPECT_EQ(Values(outputs[0]), (std::vector<float>{1, 4, 5, 6}));
  EXPECT_EQ(Values(outputs[1]), (std::vector<float>{2, 3}));
}

TEST(CollectivesExamplesTest, AllReduceOverAShmTransport) { AllReduceOver(ShmTransportExample); }

// collectives/store/store.h
absl::StatusOr<std::string> StoreExample(Store& store, int64_t* count) {
  LOCKSTEP_RETURN_IF_ERROR(store.Set("rank0/addr", "127.0.0.1:4242"));
  LOCKSTEP_ASSIGN_OR_RETURN(std::string addr, store.Get("rank1/addr"));  // waits
  LOCKSTEP_ASSIGN_OR_RETURN(int64_t arrived, store.Add("arrived", 1));
  *count = arrived;
  return addr;
}

TEST(CollectivesExamplesTest, StoreSetGetWaitsAndAdds) {
  HashStore store;
  std::thread rank1([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_TRUE(store.Set("rank1/addr", "127.0.0.1:4343").ok());
  });
  int64_t arrived = 0;
  absl::StatusOr<std::string> addr = StoreExample(store, &arrived);  // Get waits for rank 1
  rank1.join();
  ASSERT_TRUE(addr.ok()) << addr.status();
  EXPECT_EQ(*addr, "127.0.0.1:4343");
  EXPECT_EQ(arrived, 1);
  EXPECT_EQ(*store.Get("rank0/addr"), "127.0.0.1:4242");
  EXPECT_EQ(*store.Add("arrived", 1), 2);
}

// collectives/store/prefix_store.h
TEST(CollectivesExamplesTest, PrefixStoreNamespacesKeys) {
  auto base = std::make_shared<HashStore>();
  const std::string run_id = "run42";
  PrefixStore group(run_id + "/restart3", base);

  ASSERT_TRUE(group.Set("rank0", "a").ok());
  absl::StatusOr<std::string> raw = base->Get("run42/restart3/rank0", Milliseconds(1000));
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(*raw, "a");
  EXPECT_EQ(*group.Get("rank0"), "a");
  EXPECT_FALSE(*base->Check({"rank0"}));
}

// collectives/store/tcp_store.h: a one-rank group whose server runs here.
absl::StatusOr<std::unique_ptr<TcpStore>> TcpStoreExample(int rank, int world_size) {
  TcpStoreOptions options;
  options.host = "10.0.0.1";        // where the server runs
  options.host = "127.0.0.1";       // (the test: this machine)
  options.port = 29500;             // 0 on the server picks a free port
  options.port = 0;                 // (the test: any free port)
  options.is_server = (rank == 0);  // the server runs in a thread of this process
  options.num_workers = world_size; // the server waits for them all (optional)
  if (const char* token = getenv("LOCKSTEP_STORE_TOKEN")) options.token = token;  // optional shared secret
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TcpStore> store, TcpStore::Create(options));
  store->port();                    // the real port, for the others
  return store;
}

TEST(CollectivesExamplesTest, TcpStoreServesOtherClients) {
  ASSERT_EQ(std::getenv("LOCKSTEP_STORE_TOKEN"), nullptr);
  absl::StatusOr<std::unique_ptr<TcpStore>> server = TcpStoreExample(/*rank=*/0, /*world_size=*/1);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_NE((*server)->server(), nullptr);
  ASSERT_GT((*server)->port(), 0);
  TcpStoreOptions client_options;
  client_options.port = (*server)->port();
  absl::StatusOr<std::unique_ptr<TcpStore>> client = TcpStore::Create(client_options);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Set("k", "from the client").ok());
  EXPECT_EQ(*(*server)->Get("k"), "from the client");
}

// collectives/flight_recorder.h
TEST(CollectivesExamplesTest, FlightRecorderKeepsTheLastOperations) {
  FlightRecord record;
  record.op = "AllReduce";
  record.seq = 3;
  record.count = 1000;
  const absl::Status status = absl::OkStatus();
  const int rank = 0;
  FlightRecorder recorder(/*capacity=*/64);
  const uint64_t id = recorder.Start(record);   // when an operation starts
  recorder.Finish(id, status.ok());             // when it ends
  std::string json = recorder.ToJson(rank);      // the whole ring
  EXPECT_NE(json.find("\"description\":\"AllReduce #3 (f32, count 1000)\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"state\":\"done\""), std::string::npos) << json;
}

// collectives/store/file_store.h
absl::Status FileStoreExample(const std::string& shared_dir, int world_size) {
  FileStoreOptions options;
  options.num_users = world_size;  // the last to close removes the file
  // shared_dir: a directory every rank sees ("/shared/jobs")
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FileStore> store,
                            FileStore::Open(shared_dir + "/job42.store", options));
  LOCKSTEP_RETURN_IF_ERROR(store->Set("rank0/addr", "10.0.0.2:4242"));
  return store->Get("rank0/addr").status();
}

TEST(CollectivesExamplesTest, FileStoreInAFileItsLastUserRemoves) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  ASSERT_TRUE(FileStoreExample(dir, /*world_size=*/1).ok());
  EXPECT_NE(::access((dir + "/job42.store").c_str(), F_OK), 0);
}

// collectives/transport/host_identity.h
TEST(CollectivesExamplesTest, HostIdentityNamesThisHost) {
  absl::StatusOr<std::string> result = [&]() -> absl::StatusOr<std::string> {
    LOCKSTEP_ASSIGN_OR_RETURN(std::string id, LocalHostIdentity());
    // "node7/3f6c...-boot-id/net:4026531840"
    return id;
  }();
  ASSERT_TRUE(result.ok()) << result.status();
  if (const char* forced = std::getenv(kHostIdEnv); forced != nullptr && *forced != '\0') {
    EXPECT_EQ(*result, forced);
    return;
  }
  char hostname[256] = {};
  ASSERT_EQ(gethostname(hostname, sizeof(hostname) - 1), 0);
  EXPECT_EQ(result->rfind(std::string(hostname) + "/", 0), 0u) << *result;
  EXPECT_NE(result->find("/net:"), std::string::npos) << *result;
  EXPECT_EQ(*LocalHostIdentity(), *result);  // stable
  EXPECT_EQ(*LocalHostIdentity([](const char* name) { return std::string(name) == kHostIdEnv ? "fake" : nullptr; }),
            "fake");
}

// collectives/work.h
int64_t OtherWork() {
  int64_t sum = 0;
  for (int64_t i = 0; i < 1000; ++i) sum += i;
  return sum;
}

absl::Status WorkExample(Communicator* comm, const Tensor& grads, int64_t* overlapped) {
  std::shared_ptr<Work> work = comm->AllReduce(grads, ReduceOp::kSum);
  *overlapped = OtherWork();                              // overlap other work
  LOCKSTEP_RETURN_IF_ERROR(work->Wait());
  if (!work->IsCompleted()) return absl::InternalError("Wait returned before the work completed");
  return absl::OkStatus();
}

TEST(CollectivesExamplesTest, WorkWaitsForTheAllReduce) {
  std::vector<Tensor> grads = {RankData(0, 100), RankData(1, 100)};
  std::vector<int64_t> overlapped(2, 0);
  ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) {
    return WorkExample(&comm, grads[comm.rank()], &overlapped[comm.rank()]);
  }));
  EXPECT_EQ(Values(grads[0]), Summed(2, 100));
  EXPECT_EQ(Values(grads[1]), Summed(2, 100));
  EXPECT_EQ(overlapped[0], 499500);
}

// collectives/monitored_barrier.h
TEST(CollectivesExamplesTest, MonitoredBarrierPassesWhenEveryRankComes) {
  ExpectAllOk(testing::RunThreads(2, [](Communicator& comm) {
    absl::Status s = MonitoredBarrier(comm, std::chrono::seconds(30));
    return s;
  }));
}

// collectives/work_promise.h
TEST(CollectivesExamplesTest, WorkPromiseCompletesItsWork) {
  WorkPromise promise;
  std::shared_ptr<Work> work = promise.work();  // hand this out
  std::thread later([&] {
    promise.Complete(absl::OkStatus());  // later, on any thread: work->Wait() returns OK
  });
  EXPECT_TRUE(work->Wait().ok());
  later.join();
}

// collectives/communicator.h
absl::Status CommunicatorExample(std::shared_ptr<Store> store, int rank, int world_size, const Tensor& grads,
                                 const Tensor& send, const Tensor& recv) {
  // Over TCP (collectives/bootstrap/tcp_communicator.h), or from the environment
  // that torchrun, mpirun or srun set (collectives/bootstrap/init_from_env.h):
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                            CreateTcpCommunicator(store, rank, world_size, {}));
  std::shared_ptr<Work> w = comm->AllReduce(grads, ReduceOp::kAvg);
  // ... (other work)
  LOCKSTEP_RETURN_IF_ERROR(w->Wait());
  // Block j of `send` to rank j, block i of `recv` from rank i:
  LOCKSTEP_RETURN_IF_ERROR(comm->AllToAll(send, recv)->Wait());
  // Even and odd ranks, each their own group (ranks renumbered from 0):
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> half,
                            comm->Split(/*color=*/comm->rank() % 2, /*key=*/comm->rank()));
  LOCKSTEP_RETURN_IF_ERROR(half->AllReduce(grads, ReduceOp::kSum)->Wait());
  if (half->size() != world_size / 2 || half->rank() != rank / 2) return absl::InternalError("subgroup rank");
  return absl::OkStatus();
}

TEST(CollectivesExamplesTest, CommunicatorAveragesExchangesAndSplitsOverTcp) {
  auto store = std::make_shared<HashStore>();
  constexpr int kRanks = 4;
  std::vector<Tensor> grads, send, recv;
  for (int r = 0; r < kRanks; ++r) {
    grads.push_back(RankData(r, 64));
    send.push_back(RankData(r, 4 * kRanks));  // Rank r's block j: RankData(r, ...)[4j, 4j + 4).
    recv.push_back(*Tensor::Zeros({4 * kRanks}, DType::kF32));
  }
  ExpectAllOk(RunRanks(kRanks, [&](int rank) {
    return CommunicatorExample(store, rank, kRanks, grads[rank], send[rank], recv[rank]);
  }));
  // Averaged over 4, then summed over the 2 ranks of each half: twice the mean.
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(Values(grads[r]), Summed(kRanks, 64, 0.5f)) << "rank " << r;
  for (int r = 0; r < kRanks; ++r) {
    for (int i = 0; i < kRanks; ++i) {
      for (int k = 0; k < 4; ++k) EXPECT_EQ(Values(recv[r])[4 * i + k], Values(send[i])[4 * r + k]);
    }
  }
}

// collectives/elastic/elastic_group.h: three members, none lost, nobody
// waiting to join.
absl::Status ElasticGroupExample(std::shared_ptr<Store> store, int rank, const Tensor& grads, int* admitted_out) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<ElasticGroup> group,
                            ElasticGroup::Create(store, /*member=*/rank, /*size=*/3, {}));
  absl::Status s = group->comm().AllReduce(grads, ReduceOp::kSum)->Wait();
  if (!s.ok()) {                                     // a member died: every survivor sees it
    LOCKSTEP_ASSIGN_OR_RETURN(std::vector<int> lost, group->Shrink());  // epoch + 1, without it
  }
  LOCKSTEP_ASSIGN_OR_RETURN(int admitted, group->AdmitNewcomers());  // collective, between steps
  *admitted_out = admitted;
  return absl::OkStatus();
}

TEST(CollectivesExamplesTest, ElasticGroupSumsAndAdmitsNobody) {
  auto store = std::make_shared<HashStore>();
  std::vector<Tensor> grads;
  for (int r = 0; r < 3; ++r) grads.push_back(RankData(r, 8));
  std::vector<int> admitted(3, -1);
  ExpectAllOk(RunRanks(3, [&](int rank) { return ElasticGroupExample(store, rank, grads[rank], &admitted[rank]); }));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(Values(grads[r]), Summed(3, 8, 1.0f)) << "rank " << r;
    EXPECT_EQ(admitted[r], 0);
  }
}

// collectives/host_backend.h
absl::Status HostBackendExample(Store& store, int rank, int size, const Tensor& t) {
  LOCKSTEP_ASSIGN_OR_RETURN(auto transport, TcpTransport::Create(store, rank, size, {}));
  LOCKSTEP_ASSIGN_OR_RETURN(auto backend, HostBackend::Create(std::move(transport), {}));
  LOCKSTEP_ASSIGN_OR_RETURN(auto comm, Communicator::Create(std::move(backend), {}));
  if (comm->rank() != rank || comm->size() != size) return absl::InternalError("rank or size");
  return comm->Broadcast(t, /*root=*/1)->Wait();
}

TEST(CollectivesExamplesTest, HostBackendUnderACommunicator) {
  HashStore store;
  std::vector<Tensor> t = {RankData(0, 10), RankData(1, 10)};
  ExpectAllOk(RunRanks(2, [&](int rank) { return HostBackendExample(store, rank, 2, t[rank]); }));
  EXPECT_EQ(Values(t[0]), Values(RankData(1, 10)));  // rank 1's values everywhere
}

// collectives/hierarchical/hierarchical_backend.h: 4 ranks on 2 pretend hosts ("a", "b"):
// shared memory inside a host, TCP between the leaders and for the flat
// level.
absl::Status HierarchicalBackendExample(std::shared_ptr<Store> base, int rank, const Tensor& t) {
  LOCKSTEP_ASSIGN_OR_RETURN(HostLayout layout, HostLayout::FromIdentities({"a", "a", "b", "b"}));
  const int host = layout.host_of[rank];
  PrefixStore local_store("local" + std::to_string(host), base), leaders_store("leaders", base),
      flat_store("flat", base);
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<ShmTransport> shm,
                            ShmTransport::Create(local_store, layout.local_index[rank],
                                                 static_cast<int>(layout.hosts[host].size()), {}));
  std::unique_ptr<TcpTransport> tcp;  // leaders only
  if (layout.is_leader(rank)) {
    LOCKSTEP_ASSIGN_OR_RETURN(tcp, TcpTransport::Create(leaders_store, host, layout.num_hosts(), {}));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TcpTransport> flat_transport,
                            TcpTransport::Create(flat_store, rank, layout.world_size(), {}));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<HostBackend> flat_tcp,
                            HostBackend::Create(std::move(flat_transport), {}, "tcp"));
  HierarchicalBackend::Levels levels;
  levels.local = std::move(shm);       // this host's ranks, local order
  levels.leaders = std::move(tcp);     // on leaders: one rank per host
  levels.flat = std::move(flat_tcp);   // every rank
  LOCKSTEP_ASSIGN_OR_RETURN(auto backend,
      HierarchicalBackend::Create(layout, rank, std::move(levels), {}));
  LOCKSTEP_ASSIGN_OR_RETURN(auto comm, Communicator::Create(std::move(backend), {}));
  return comm->AllReduce(t, ReduceOp::kSum)->Wait();
}

TEST(CollectivesExamplesTest, HierarchicalBackendAllReducesOverTwoLevels) {
  auto store = std::make_shared<HashStore>();
  std::vector<Tensor> t;
  for (int rank = 0; rank < 4; ++rank) t.push_back(RankData(rank, 300));
  ExpectAllOk(RunRanks(4, [&](int rank) { return HierarchicalBackendExample(store, rank, t[rank]); }));
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(Values(t[rank]), Summed(4, 300)) << rank;
}

// ddp/bucket_assignment.h
TEST(CollectivesExamplesTest, BucketAssignmentFollowsPyTorchsRule) {
  absl::StatusOr<BucketAssignment> result = []() -> absl::StatusOr<BucketAssignment> {
    std::vector<BucketItem> items = {{600 << 10, DType::kF32, Device::Cpu()}, {600 << 10, DType::kF32, Device::Cpu()}, {600 << 10, DType::kF32, Device::Cpu()}};  // x3
    LOCKSTEP_ASSIGN_OR_RETURN(BucketAssignment a,
                              AssignBuckets(items, {kDefaultFirstBucketBytes, 25 << 20}));
    // a.buckets == {{0, 1}, {2}}, a.size_limits == {1 << 20, 25 << 20}
    return a;
  }();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->buckets, (std::vector<std::vector<size_t>>{{0, 1}, {2}}));
  EXPECT_EQ(result->size_limits, (std::vector<size_t>{1 << 20, 25 << 20}));
}

std::vector<Tensor> Pick(const std::vector<Tensor>& all, const std::vector<size_t>& indices) {
  std::vector<Tensor> out;
  for (size_t i : indices) out.push_back(all[i]);
  return out;
}

// ddp/grad_bucket.h: every bucket of `grads` packed, averaged over
// the ranks and unpacked.
absl::Status GradBucketExample(Communicator& comm, const std::vector<Tensor>& grads) {
  std::vector<BucketItem> items;
  for (const Tensor& g : grads) items.push_back({g.nbytes(), g.dtype(), g.device()});
  const std::vector<size_t> limits = {256, 1024};
  LOCKSTEP_ASSIGN_OR_RETURN(BucketAssignment a, AssignBuckets(items, limits));
  if (a.buckets.size() < 2) return absl::InternalError("expected several buckets");
  for (size_t b = 0; b < a.buckets.size(); ++b) {
    std::vector<Tensor> members = Pick(grads, a.buckets[b]);  // grads[i] for i in a.buckets[b]
    LOCKSTEP_ASSIGN_OR_RETURN(GradBucket bucket,
        GradBucket::Create(b, b + 1 == a.buckets.size(), members, a.buckets[b]));
    LOCKSTEP_RETURN_IF_ERROR(bucket.CopyInAll());          // pack
    LOCKSTEP_RETURN_IF_ERROR(comm.AllReduce(bucket.buffer(), ReduceOp::kAvg)->Wait());
    LOCKSTEP_RETURN_IF_ERROR(bucket.CopyOutAll());         // unpack
  }
  return absl::OkStatus();
}

TEST(CollectivesExamplesTest, GradBucketsPackReduceAndUnpack) {
  std::vector<std::vector<Tensor>> grads(2);
  for (int rank = 0; rank < 2; ++rank) {
    for (int64_t n : {50, 100, 20, 300}) grads[rank].push_back(RankData(rank, n));
  }
  ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) { return GradBucketExample(comm, grads[comm.rank()]); }));
  for (int rank = 0; rank < 2; ++rank) {
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(Values(grads[rank][i]), Summed(2, grads[rank][i].numel(), 0.5f)) << rank << " " << i;
    }
  }
}

// ddp/fused_all_reduce.h
absl::Status FusedAllReduceExample(Communicator& comm, const std::vector<Tensor>& grads) {
  LOCKSTEP_ASSIGN_OR_RETURN(auto fused,
      FusedAllReduce::Start(comm, grads, ReduceOp::kAvg, /*bucket_cap_bytes=*/25 << 20));
  OtherWork();                                  // overlap
  LOCKSTEP_RETURN_IF_ERROR(fused->Wait());  // every tensor now holds the result
  return absl::OkStatus();
}

TEST(CollectivesExamplesTest, FusedAllReduceAveragesEveryTensor) {
  std::vector<std::vector<Tensor>> grads(2);
  for (int rank = 0; rank < 2; ++rank) {
    for (int64_t n : {7, 1000, 33}) grads[rank].push_back(RankData(rank, n));
  }
  ExpectAllOk(
      testing::RunThreads(2, [&](Communicator& comm) { return FusedAllReduceExample(comm, grads[comm.rank()]); }));
  for (int rank = 0; rank < 2; ++rank) {
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(Values(grads[rank][i]), Summed(2, grads[rank][i].numel(), 0.5f)) << rank << " " << i;
    }
  }
}

// collectives/nccl/nccl_communicator.h: needs NCCL and a CUDA device; where
// they are missing, CreateNcclCommunicator fails and so does the function.
absl::Status NcclCommunicatorExample(std::shared_ptr<Store> store, int rank, int world_size, int local_rank) {
  NcclCommunicatorOptions options;
  options.communicator.timeout = Milliseconds(60000);
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
      CreateNcclCommunicator(store, rank, world_size, Device::Cuda(local_rank), options));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor host, Tensor::FromVector<float>({1, 2, 3}));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, host.To(Device::Cuda(local_rank)));
  LOCKSTEP_RETURN_IF_ERROR(comm->AllReduce(t, ReduceOp::kSum)->Wait());
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<float> back, t.ToVector<float>());
  if (back != std::vector<float>{1, 2, 3}) return absl::InternalError("a one-rank sum changed the tensor");
  return absl::OkStatus();
}

TEST(CollectivesExamplesTest, NcclCommunicatorOnOneGpu) {
  const absl::Status s = NcclCommunicatorExample(std::make_shared<HashStore>(), 0, 1, 0);
  if (cuda::DeviceCount() == 0 || LinkedNcclVersion() == 0) {
    EXPECT_FALSE(s.ok());
    GTEST_SKIP() << "no CUDA device or no NCCL: " << s;
  }
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace lockstep
