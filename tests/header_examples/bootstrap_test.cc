// The usage examples of collectives/bootstrap's public headers, compiled and
// run. Each example's lines appear below exactly as in its header (checked by
// //tests:header_examples_check); lines in between set up its inputs or check
// its results. Where an example names an address of a real cluster, a line
// after it points the test at this machine instead.
//
// local_launch.h's example starts this test binary twice as the ranks of a
// group (torchrun's environment); those two processes run only
// LaunchedRankJoinsTheGroup (GTEST_FILTER is inherited), which runs the
// examples of rank_environment.h and init_from_env.h.
#include <chrono>
#include <functional>
#include <optional>
#include <cstdlib>
#include <fstream>
#include <future>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/bootstrap/backend_choice.h"
#include "collectives/bootstrap/communicator_factory.h"
#include "collectives/bootstrap/init_from_env.h"
#include "collectives/bootstrap/local_launch.h"
#include "collectives/bootstrap/rank_environment.h"
#include "collectives/bootstrap/shm_communicator.h"
#include "collectives/bootstrap/tcp_communicator.h"
#include "collectives/communicator.h"
#include "collectives/nccl/nccl_communicator.h"
#include "collectives/store/hash_store.h"
#include "collectives/store/store.h"
#include "collectives/store/tcp_store.h"
#include "core/cuda/cuda_runtime.h"
#include "core/device.h"
#include "core/reduce_op.h"
#include "core/status.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

// The program's --backend flag, as the trainers define it (backend_choice.h's
// example reads it).
ABSL_FLAG(std::string, backend, "", "collectives backend: \"\", auto, nccl or host");

namespace lockstep {
namespace {

// Set while this test binary runs as a rank started by LocalLaunchExample.
constexpr char kChildEnv[] = "LOCKSTEP_HEADER_EXAMPLE_CHILD";

std::vector<float> Values(const Tensor& t) { return *t.ToVector<float>(); }

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

// collectives/bootstrap/backend_choice.h
absl::StatusOr<BackendChoice> BackendChoiceExample(const RankEnvironment& env, int local_rank) {
  BackendChoiceInput in;
  in.device = Device::Cuda(local_rank);
  in.nccl_version = LinkedNcclVersion();         // collectives/nccl/nccl_communicator.h
  in.visible_gpus = cuda::DeviceCount();
  in.local_world_size = env.local_world_size;
  in.requested = absl::GetFlag(FLAGS_backend);   // "", "auto", "nccl", "host"
  in.environment = BackendFromEnvironment();     // LOCKSTEP_BACKEND
  LOCKSTEP_ASSIGN_OR_RETURN(BackendChoice choice, ChooseBackend(in));
  // choice.kind, and choice.reason for the log.
  return choice;
}

TEST(BootstrapExamplesTest, BackendChoiceFromDeviceFlagAndEnvironment) {
  ASSERT_EQ(std::getenv("LOCKSTEP_BACKEND"), nullptr);
  RankEnvironment env;
  const bool nccl_works = LinkedNcclVersion() > 0 && cuda::DeviceCount() > 0;
  absl::StatusOr<BackendChoice> choice = BackendChoiceExample(env, 0);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->kind, nccl_works ? BackendKind::kNccl : BackendKind::kHost);
  EXPECT_FALSE(choice->reason.empty());

  absl::SetFlag(&FLAGS_backend, "host");  // a request wins
  choice = BackendChoiceExample(env, 0);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->kind, BackendKind::kHost);

  absl::SetFlag(&FLAGS_backend, "nccl");
  choice = BackendChoiceExample(env, 0);
  if (nccl_works) {
    EXPECT_TRUE(choice.ok()) << choice.status();
  } else {
    EXPECT_FALSE(choice.ok());  // forcing NCCL where it cannot work says why
  }
  absl::SetFlag(&FLAGS_backend, "");
}

// collectives/bootstrap/shm_communicator.h
absl::Status ShmCommunicatorExample(std::shared_ptr<Store> shared, int rank, int world_size, const Tensor& t) {
  std::shared_ptr<Store> store = shared;  // see collectives/store/tcp_store.h
  ShmCommunicatorOptions options;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                            CreateShmCommunicator(store, rank, world_size, options));
  return comm->AllReduce(t, ReduceOp::kMax)->Wait();
}

TEST(BootstrapExamplesTest, ShmCommunicatorAllReduces) {
  auto store = std::make_shared<HashStore>();
  std::vector<Tensor> t = {*Tensor::FromVector<float>({1, 5, 3}), *Tensor::FromVector<float>({4, 2, 6})};
  const std::vector<absl::Status> results =
      RunRanks(2, [&](int rank) { return ShmCommunicatorExample(store, rank, 2, t[rank]); });
  for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(Values(t[0]), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(Values(t[1]), (std::vector<float>{4, 5, 6}));
}

// collectives/bootstrap/communicator_factory.h (its second indented block;
// the first is a table). `env` fakes each rank's LOCKSTEP_HOST_ID.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-value"  // the example names a field as a statement
absl::StatusOr<std::string> CommunicatorFactoryExample(std::shared_ptr<Store> store, int rank, int world_size,
                                                       const EnvLookup& env, const Tensor& t) {
  CommunicatorFactoryOptions options;
  options.tcp.host = "10.0.0.2";  // where ranks on other hosts reach this one
  options.tcp.host = "127.0.0.1";  // (the test: this machine)
  LOCKSTEP_RETURN_IF_ERROR(ApplyTransportEnvironment(env, &options));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                            CreateCommunicator(store, rank, world_size, options));
  comm->capabilities().name;  // "host over shm", "host over tcp", "hierarchical(shm+tcp)"
  LOCKSTEP_RETURN_IF_ERROR(comm->AllReduce(t, ReduceOp::kSum)->Wait());
  return comm->capabilities().name;
}
#pragma GCC diagnostic pop

// Each rank's host, as LOCKSTEP_HOST_ID says.
std::vector<std::string> FactoryRun(const std::vector<std::string>& hosts) {
  const int size = static_cast<int>(hosts.size());
  auto store = std::make_shared<HashStore>();
  std::vector<std::string> names(size);
  std::vector<Tensor> t;
  for (int rank = 0; rank < size; ++rank) t.push_back(*Tensor::FromVector<float>({1.0f + rank}));
  const std::vector<absl::Status> results = RunRanks(size, [&](int rank) -> absl::Status {
    const EnvLookup env = [&, rank](const char* name) -> const char* {
      if (std::string(name) == "LOCKSTEP_HOST_ID") return hosts[rank].c_str();
      return nullptr;  // LOCKSTEP_TRANSPORT unset: "auto"
    };
    LOCKSTEP_ASSIGN_OR_RETURN(names[rank], CommunicatorFactoryExample(store, rank, size, env, t[rank]));
    return absl::OkStatus();
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
  const float sum = static_cast<float>(size * (size + 1) / 2);
  for (int rank = 0; rank < size; ++rank) EXPECT_EQ(Values(t[rank]), (std::vector<float>{sum})) << rank;
  return names;
}

TEST(BootstrapExamplesTest, CommunicatorFactoryChoosesByHost) {
  EXPECT_EQ(FactoryRun({"a", "a"}), (std::vector<std::string>(2, "host over shm")));
  EXPECT_EQ(FactoryRun({"a", "b"}), (std::vector<std::string>(2, "host over tcp")));
  EXPECT_EQ(FactoryRun({"a", "a", "b", "b"}), (std::vector<std::string>(4, "hierarchical(shm+tcp)")));
}

// collectives/bootstrap/tcp_communicator.h: rank 0 serves the store on a
// free port and tells rank 1 through `port`.
absl::Status TcpCommunicatorExample(int rank, int world_size, std::shared_future<int> port,
                                    std::promise<int>* served, const Tensor& t) {
  TcpStoreOptions store_options;  // see collectives/store/tcp_store.h
  store_options.is_server = rank == 0;
  if (rank != 0) store_options.port = port.get();
  LOCKSTEP_ASSIGN_OR_RETURN(std::shared_ptr<Store> store, TcpStore::Create(store_options));
  if (rank == 0) served->set_value(static_cast<TcpStore&>(*store).port());
  TcpCommunicatorOptions options;
  options.transport.host = "10.0.0.2";  // where the other ranks reach this one
  options.transport.host = "127.0.0.1";  // (the test: this machine)
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                            CreateTcpCommunicator(store, rank, world_size, options));
  LOCKSTEP_RETURN_IF_ERROR(comm->AllReduce(t, ReduceOp::kSum)->Wait());
  return comm->Barrier()->Wait();  // rank 0's store serves until both are done
}

TEST(BootstrapExamplesTest, TcpCommunicatorOverATcpStore) {
  std::promise<int> served;
  std::shared_future<int> port = served.get_future().share();
  std::vector<Tensor> t = {*Tensor::FromVector<float>({1, 2}), *Tensor::FromVector<float>({10, 20})};
  const std::vector<absl::Status> results =
      RunRanks(2, [&](int rank) { return TcpCommunicatorExample(rank, 2, port, &served, t[rank]); });
  for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(Values(t[0]), (std::vector<float>{11, 22}));
  EXPECT_EQ(Values(t[1]), (std::vector<float>{11, 22}));
}

// collectives/bootstrap/local_launch.h: the ranks are this test binary
// (see the top of the file).
absl::Status LocalLaunchExample() {
  LocalLaunchOptions options;
  options.nproc = 2;
  options.argv = {"/proc/self/exe", "--epochs=3"};   // each rank's command line
  LOCKSTEP_RETURN_IF_ERROR(RunLocalRanks(options));   // waits for all
  return absl::OkStatus();
}

// Sets environment variables for the children, restoring them when it goes.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::vector<std::pair<std::string, std::string>> vars) {
    for (auto& [name, value] : vars) {
      const char* old = std::getenv(name.c_str());
      saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
      setenv(name.c_str(), value.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (auto& [name, old] : saved_) {
      if (old) {
        setenv(name.c_str(), old->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(BootstrapExamplesTest, LocalLaunchRunsTwoRanks) {
  if (std::getenv(kChildEnv) != nullptr) GTEST_SKIP() << "in a launched rank";
  const std::string tmp = ::testing::TempDir();
  ScopedEnv env({{"GTEST_FILTER", "BootstrapExamplesTest.LaunchedRankJoinsTheGroup"},
                 {kChildEnv, "local_launch"},
                 {"XML_OUTPUT_FILE", tmp + "/launched_rank.xml"},
                 {"TEST_PREMATURE_EXIT_FILE", tmp + "/launched_rank.exited"}});
  const absl::Status s = LocalLaunchExample();
  EXPECT_TRUE(s.ok()) << s;
}

// collectives/bootstrap/rank_environment.h
absl::StatusOr<TcpStoreOptions> RankEnvironmentExample(RankEnvironment* out) {
  LOCKSTEP_ASSIGN_OR_RETURN(RankEnvironment env, RankEnvironmentFromEnv());
  TcpStoreOptions store;
  store.host = env.master_addr;
  store.port = env.master_port;
  store.is_server = env.rank == 0 && !env.agent_store;
  store.token = env.store_token;
  *out = env;
  return store;
}

// collectives/bootstrap/init_from_env.h
absl::Status InitFromEnvExample(const Tensor& grads, std::string* backend) {
  LOCKSTEP_ASSIGN_OR_RETURN(ProcessGroup group, InitFromEnv());
  LOCKSTEP_RETURN_IF_ERROR(group.comm->AllReduce(grads, ReduceOp::kAvg)->Wait());
  *backend = group.comm->capabilities().name;
  return group.comm->Barrier()->Wait();
}

// Runs only in the ranks that LocalLaunchRunsTwoRanks starts.
TEST(BootstrapExamplesTest, LaunchedRankJoinsTheGroup) {
  const char* role = std::getenv(kChildEnv);
  if (role == nullptr || std::string(role) != "local_launch") GTEST_SKIP() << "runs as a rank of LocalLaunchRunsTwoRanks";
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(cmdline.find(std::string("\0--epochs=3", 11)), std::string::npos);

  RankEnvironment env;
  absl::StatusOr<TcpStoreOptions> store = RankEnvironmentExample(&env);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(env.world_size, 2);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.local_rank, env.rank);
  EXPECT_EQ(env.source, "torchrun");
  EXPECT_EQ(store->host, "127.0.0.1");
  EXPECT_GT(store->port, 0);
  EXPECT_TRUE(env.agent_store);     // the launcher holds the store
  EXPECT_FALSE(store->is_server);
  EXPECT_FALSE(store->token.empty());

  const Tensor grads = *Tensor::FromVector<float>({1.0f + env.rank, 10.0f * (1 + env.rank)});
  std::string backend;
  const absl::Status s = InitFromEnvExample(grads, &backend);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(Values(grads), (std::vector<float>{1.5f, 15.0f}));
  EXPECT_NE(backend.find("shm"), std::string::npos) << backend;  // both ranks on this host
}

}  // namespace
}  // namespace lockstep
