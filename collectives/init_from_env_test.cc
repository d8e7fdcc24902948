// InitFromEnv with the variables each launcher sets: torchrun's (rank 0
// serving the store, or an agent's store), Open MPI's and Slurm's, with
// threads as ranks on loopback; a missing variable fails naming it.
#include "collectives/init_from_env.h"

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/tcp_store.h"
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

// Runs an all-reduce of (rank + 1) on every rank of `envs` and checks the sum.
void ExpectGroupWorks(const std::vector<Env>& envs) {
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
    envs.push_back({{"RANK", std::to_string(r)}, {"WORLD_SIZE", "3"}, {"LOCAL_RANK", std::to_string(r)},
                    {"LOCAL_WORLD_SIZE", "3"}, {"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", std::to_string((*server)->port())},
                    {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  }
  ExpectGroupWorks(envs);
}

TEST(InitFromEnvTest, OpenMpiOnOneNodeWithATokenAndRankZeroServing) {
  const int port = RecentlyFreePort();  // Rank 0 serves there.
  std::vector<Env> envs;
  for (int r = 0; r < 2; ++r) {
    envs.push_back({{"OMPI_COMM_WORLD_RANK", std::to_string(r)}, {"OMPI_COMM_WORLD_SIZE", "2"},
                    {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(r)}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                    {"MASTER_PORT", std::to_string(port)}, {"LOCKSTEP_STORE_TOKEN", "s3cret"},
                    // mpirun inside an allocation: Slurm's rank must be ignored.
                    {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  }
  ExpectGroupWorks(envs);
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
  Env env = {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
             {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}};
  InitOptions options;
  options.store_timeout = Milliseconds(300);
  absl::StatusOr<ProcessGroup> group = InitFromEnv(Lookup(env), options);
  ASSERT_FALSE(group.ok());
  EXPECT_NE(group.status().message().find(absl::StrCat("127.0.0.1:", port)), absl::string_view::npos)
      << group.status();
}

}  // namespace
}  // namespace lockstep
