// InitFromEnv with the variables each launcher sets: torchrun's (rank 0
// serving the store, or an agent's store), Open MPI's and Slurm's, with
// threads as ranks on loopback; a missing variable fails naming it. The
// transport is chosen automatically (shared memory here; TCP when
// LOCKSTEP_TRANSPORT forces it); 4 processes on 2 hosts faked with
// LOCKSTEP_HOST_ID run hierarchically.
#include "collectives/bootstrap/init_from_env.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/bootstrap/local_launch.h"
#include "collectives/store/tcp_store.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using Env = std::map<std::string, std::string>;

EnvLookup Lookup(const Env& env) {
  return [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

// Runs an all-reduce of (rank + 1) on every rank of `envs` and checks the
// sum and the transport's name.
void ExpectGroupWorks(const std::vector<Env>& envs, const std::string& transport = "host over shm") {
  const int n = static_cast<int>(envs.size());
  std::vector<absl::Status> results(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      InitOptions options;
      options.store_timeout = Milliseconds(30000);
      absl::StatusOr<ProcessGroup> group = InitFromEnv(Lookup(envs[i]), options);
      if (!group.ok()) {
        results[i] = group.status();
        return;
      }
      Tensor t = *Tensor::Empty({4}, DType::kF32);
      for (int k = 0; k < 4; ++k) t.data<float>()[k] = static_cast<float>(group->env.rank + 1);
      if (group->comm->capabilities().name != transport) {
        results[i] = absl::InternalError(
            absl::StrCat("transport '", group->comm->capabilities().name, "', expected '", transport, "'"));
        return;
      }
      results[i] = group->comm->AllReduce(t, ReduceOp::kSum)->Wait();
      if (results[i].ok() && t.data<float>()[3] != n * (n + 1) / 2.0f) {
        results[i] = absl::InternalError(absl::StrCat("sum is ", t.data<float>()[3]));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < n; ++i) EXPECT_TRUE(results[i].ok()) << "process " << i << ": " << results[i];
}

// A port that was free a moment ago, for tests where rank 0 itself must
// serve the store (the listen-close gap is acceptable inside one test).
int RecentlyFreePort() {
  TcpStoreServerOptions probe;
  probe.host = "127.0.0.1";
  auto server = TcpStoreServer::Start(probe);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? (*server)->port() : 1;
}

TEST(InitFromEnvTest, TorchrunVariablesWithAnAgentStore) {
  TcpStoreServerOptions server_options;
  server_options.host = "127.0.0.1";
  auto server = TcpStoreServer::Start(server_options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<Env> envs;
  for (int r = 0; r < 3; ++r) {
    envs.push_back({{"RANK", std::to_string(r)},
                    {"WORLD_SIZE", "3"},
                    {"LOCAL_RANK", std::to_string(r)},
                    {"LOCAL_WORLD_SIZE", "3"},
                    {"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", std::to_string((*server)->port())},
                    {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  }
  ExpectGroupWorks(envs);
}

TEST(InitFromEnvTest, AnAgentStoreIsPrefixedPerAttemptAsTorchDoes) {
  TcpStoreServerOptions server_options;
  server_options.host = "127.0.0.1";
  auto server = TcpStoreServer::Start(server_options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto attempt = [&](const char* restart_count) {
    Env env = {{"RANK", "0"},
               {"WORLD_SIZE", "1"},
               {"LOCAL_RANK", "0"},
               {"LOCAL_WORLD_SIZE", "1"},
               {"MASTER_ADDR", "127.0.0.1"},
               {"MASTER_PORT", std::to_string((*server)->port())},
               {"TORCHELASTIC_USE_AGENT_STORE", "True"},
               {"TORCHELASTIC_RESTART_COUNT", restart_count}};
    InitOptions options;
    options.store_timeout = Milliseconds(30000);
    absl::StatusOr<ProcessGroup> group = InitFromEnv(Lookup(env), options);
    EXPECT_TRUE(group.ok()) << group.status();
    return group.ok() ? group->store : nullptr;
  };
  std::shared_ptr<Store> first = attempt("0");
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(first->Set("checkpoint_step", "7").ok());
  // The next attempt at the same store sees none of the failed attempt's keys.
  std::shared_ptr<Store> second = attempt("1");
  ASSERT_NE(second, nullptr);
  EXPECT_FALSE(second->Get("checkpoint_step", Milliseconds(50)).ok());
  // Where they are: under torch's prefix on the launcher's store.
  TcpStoreOptions raw_options;
  raw_options.host = "127.0.0.1";
  raw_options.port = (*server)->port();
  auto raw = TcpStore::Create(raw_options);
  ASSERT_TRUE(raw.ok()) << raw.status();
  absl::StatusOr<std::string> value = (*raw)->Get("/worker/attempt_0/checkpoint_step", Milliseconds(5000));
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "7");
}

TEST(InitFromEnvTest, OpenMpiOnOneNodeWithATokenAndRankZeroServing) {
  const int port = RecentlyFreePort();  // Rank 0 serves there.
  std::vector<Env> envs;
  for (int r = 0; r < 2; ++r) {
    envs.push_back({{"OMPI_COMM_WORLD_RANK", std::to_string(r)},
                    {"OMPI_COMM_WORLD_SIZE", "2"},
                    {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(r)},
                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                    {"MASTER_PORT", std::to_string(port)},
                    {"LOCKSTEP_STORE_TOKEN", "s3cret"},
                    // mpirun inside an allocation: Slurm's rank must be ignored.
                    {"SLURM_PROCID", "0"},
                    {"SLURM_NTASKS", "1"}});
  }
  ExpectGroupWorks(envs);
}

TEST(InitFromEnvTest, LockstepTransportForcesTcp) {
  TcpStoreServerOptions server_options;
  server_options.host = "127.0.0.1";
  auto server = TcpStoreServer::Start(server_options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<Env> envs;
  for (int r = 0; r < 2; ++r) {
    envs.push_back({{"RANK", std::to_string(r)},
                    {"WORLD_SIZE", "2"},
                    {"LOCAL_RANK", std::to_string(r)},
                    {"LOCAL_WORLD_SIZE", "2"},
                    {"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", std::to_string((*server)->port())},
                    {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                    {"LOCKSTEP_TRANSPORT", "tcp"}});
  }
  ExpectGroupWorks(envs, "host over tcp");
}

// A rank started by RunLocalRanks below: ranks 0-1 on "host-a", 2-3 on
// "host-b" (LOCKSTEP_HOST_ID), checks the hierarchical group's results.
absl::Status RunFakeHostRank() {
  const int rank = std::atoi(std::getenv("RANK"));
  const std::string host_id = rank < 2 ? "host-a" : "host-b";
  EnvLookup env = [&host_id](const char* name) -> const char* {
    return std::string(name) == "LOCKSTEP_HOST_ID" ? host_id.c_str() : std::getenv(name);
  };
  InitOptions options;
  options.store_timeout = Milliseconds(60000);
  options.communicator.communicator.timeout = Milliseconds(60000);
  options.communicator.transport.timeout = Milliseconds(60000);
  options.shm.timeout = Milliseconds(60000);
  LOCKSTEP_ASSIGN_OR_RETURN(ProcessGroup group, InitFromEnv(env, options));
  Communicator& comm = *group.comm;
  if (comm.capabilities().name != "hierarchical(shm+tcp)") {
    return absl::InternalError(absl::StrCat("transport '", comm.capabilities().name, "'"));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros({100000}, DType::kI64));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = (rank + 1) * (i % 5);
  LOCKSTEP_RETURN_IF_ERROR(comm.AllReduce(t, ReduceOp::kSum)->Wait());
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.data<int64_t>()[i] != 10 * (i % 5)) return absl::InternalError(absl::StrCat("all_reduce element ", i));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor in, Tensor::Zeros({7}, DType::kI64));
  for (int64_t i = 0; i < 7; ++i) in.data<int64_t>()[i] = rank + 1;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros({7}, DType::kI64));
  LOCKSTEP_RETURN_IF_ERROR(comm.Reduce(in, out, ReduceOp::kProd, 1)->Wait());  // Root 1: not a leader.
  if (rank == 1 && out.data<int64_t>()[6] != 24) return absl::InternalError("reduce");
  LOCKSTEP_RETURN_IF_ERROR(comm.Broadcast(in, 3)->Wait());
  if (in.data<int64_t>()[0] != 4) return absl::InternalError("broadcast");
  return comm.Barrier()->Wait();
}

TEST(InitFromEnvTest, ProcessesOnTwoFakeHostsRunHierarchically) {
  if (std::getenv("RANK") != nullptr && std::getenv("TORCHELASTIC_USE_AGENT_STORE") != nullptr) {
    alarm(120);  // A hung rank dies.
    const absl::Status status = RunFakeHostRank();
    if (!status.ok()) std::fprintf(stderr, "rank %s: %s\n", std::getenv("RANK"), status.ToString().c_str());
    std::fflush(nullptr);
    _exit(status.ok() ? 0 : 1);  // Never back into gtest.
  }
  LocalLaunchOptions launch;
  launch.nproc = 4;
  launch.name = "init_from_env_test";
  launch.bind_to_core = false;
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  launch.argv = {"/proc/self/exe", absl::StrCat("--gtest_filter=", test->test_suite_name(), ".", test->name())};
  const absl::Status status = RunLocalRanks(launch);
  EXPECT_TRUE(status.ok()) << status;
}

TEST(InitFromEnvTest, MissingVariablesAreNamed) {
  Env env = {{"RANK", "0"}};
  absl::StatusOr<ProcessGroup> group = InitFromEnv(Lookup(env), InitOptions());
  ASSERT_FALSE(group.ok());
  EXPECT_NE(group.status().message().find("WORLD_SIZE"), absl::string_view::npos) << group.status();
  Env none;
  group = InitFromEnv(Lookup(none), InitOptions());
  ASSERT_FALSE(group.ok());
  EXPECT_NE(group.status().message().find("RANK"), absl::string_view::npos) << group.status();
  EXPECT_NE(group.status().message().find("SLURM_PROCID"), absl::string_view::npos) << group.status();
}

TEST(InitFromEnvTest, AnUnreachableStoreNamesTheAddress) {
  const int port = RecentlyFreePort();  // Nobody serves there.
  Env env = {{"RANK", "1"},
             {"WORLD_SIZE", "2"},
             {"LOCAL_RANK", "1"},
             {"LOCAL_WORLD_SIZE", "2"},
             {"MASTER_ADDR", "127.0.0.1"},
             {"MASTER_PORT", std::to_string(port)}};
  InitOptions options;
  options.store_timeout = Milliseconds(300);
  absl::StatusOr<ProcessGroup> group = InitFromEnv(Lookup(env), options);
  ASSERT_FALSE(group.ok());
  EXPECT_NE(group.status().message().find(absl::StrCat("127.0.0.1:", port)), absl::string_view::npos) << group.status();
}

}  // namespace
}  // namespace lockstep
