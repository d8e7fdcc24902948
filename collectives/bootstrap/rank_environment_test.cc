#include "collectives/bootstrap/rank_environment.h"

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

using Vars = std::map<std::string, std::string>;

absl::StatusOr<RankEnvironment> Parse(const Vars& vars) {
  return RankEnvironmentFromEnv([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

// Expects an error of `code` whose message contains every one of `parts`.
void ExpectError(const Vars& vars, absl::StatusCode code, const std::vector<std::string>& parts) {
  absl::StatusOr<RankEnvironment> env = Parse(vars);
  ASSERT_FALSE(env.ok()) << "accepted; source " << env->source;
  EXPECT_EQ(env.status().code(), code) << env.status();
  for (const std::string& part : parts) {
    EXPECT_NE(env.status().message().find(part), absl::string_view::npos)
        << "'" << part << "' not in: " << env.status().message();
  }
}

void ExpectInvalid(const Vars& vars, const std::vector<std::string>& parts) {
  ExpectError(vars, absl::StatusCode::kInvalidArgument, parts);
}

Vars Torchrun() {
  return {{"RANK", "3"},
          {"WORLD_SIZE", "8"},
          {"LOCAL_RANK", "1"},
          {"LOCAL_WORLD_SIZE", "2"},
          {"MASTER_ADDR", "10.0.0.1"},
          {"MASTER_PORT", "29400"}};
}

Vars OpenMpi(int rank, int size, int local_rank, int local_size) {
  return {{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
          {"OMPI_COMM_WORLD_SIZE", std::to_string(size)},
          {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(local_rank)},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(local_size)}};
}

// Task 5 of 8 on the second of three nodes holding 3, 3 and 2 tasks.
Vars Slurm() {
  return {{"SLURM_PROCID", "5"},
          {"SLURM_NTASKS", "8"},
          {"SLURM_LOCALID", "2"},
          {"SLURM_NODEID", "1"},
          {"SLURM_TASKS_PER_NODE", "3(x2),2"},
          {"SLURM_JOB_NODELIST", "gpu[007-009]"},
          {"SLURM_JOB_ID", "123456"}};
}

Vars With(Vars vars, const Vars& changes) {
  for (const auto& [name, value] : changes) vars[name] = value;
  return vars;
}

Vars Without(Vars vars, const std::vector<std::string>& names) {
  for (const std::string& name : names) vars.erase(name);
  return vars;
}

// --- torchrun ---

TEST(RankEnvironmentTest, Torchrun) {
  absl::StatusOr<RankEnvironment> env =
      Parse(With(Torchrun(), {{"LOCKSTEP_STORE_TOKEN", "s3cret"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, "torchrun");
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->master_addr, "10.0.0.1");
  EXPECT_EQ(env->master_port, 29400);
  EXPECT_EQ(env->store_token, "s3cret");
  EXPECT_TRUE(env->agent_store);
}

TEST(RankEnvironmentTest, TorchrunDefaults) {
  // No MASTER_PORT: torchrun's 29500. No token, no agent store.
  absl::StatusOr<RankEnvironment> env = Parse(Without(Torchrun(), {"MASTER_PORT"}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->master_port, 29500);
  EXPECT_EQ(env->store_token, "");
  EXPECT_FALSE(env->agent_store);
  // Neither local variable: one node.
  env = Parse(Without(Torchrun(), {"LOCAL_RANK", "LOCAL_WORLD_SIZE"}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->local_rank, 3);
  EXPECT_EQ(env->local_world_size, 8);
  env = Parse(With(Torchrun(), {{"TORCHELASTIC_USE_AGENT_STORE", "False"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_FALSE(env->agent_store);
}

TEST(RankEnvironmentTest, TorchrunIsAllOrNothing) {
  ExpectInvalid(Without(Torchrun(), {"WORLD_SIZE"}), {"RANK is set", "WORLD_SIZE is not", "torchrun"});
  ExpectInvalid(Without(Torchrun(), {"RANK"}), {"WORLD_SIZE is set", "RANK is not"});
  ExpectInvalid(Without(Torchrun(), {"LOCAL_WORLD_SIZE"}), {"LOCAL_RANK is set", "LOCAL_WORLD_SIZE is not"});
  ExpectInvalid(Without(Torchrun(), {"LOCAL_RANK"}), {"LOCAL_WORLD_SIZE is set", "LOCAL_RANK is not"});
  ExpectInvalid(Without(Torchrun(), {"MASTER_ADDR"}), {"MASTER_ADDR is not", "set MASTER_ADDR"});
  // An empty value is unset.
  ExpectInvalid(With(Torchrun(), {{"WORLD_SIZE", ""}}), {"WORLD_SIZE is not"});
}

TEST(RankEnvironmentTest, RejectsBadNumbers) {
  ExpectInvalid(With(Torchrun(), {{"RANK", "three"}}), {"RANK='three'", "not a whole number", "expected"});
  ExpectInvalid(With(Torchrun(), {{"RANK", " 3"}}), {"RANK=' 3'", "not a whole number"});
  ExpectInvalid(With(Torchrun(), {{"RANK", "+3"}}), {"RANK='+3'"});
  ExpectInvalid(With(Torchrun(), {{"RANK", "-1"}}), {"RANK=-1 is negative", ">= 0"});
  ExpectInvalid(With(Torchrun(), {{"RANK", "99999999999"}}), {"RANK=99999999999 is out of range"});
  ExpectInvalid(With(Torchrun(), {{"RANK", "8"}}), {"RANK=8 is not below WORLD_SIZE=8", "0 <= RANK < WORLD_SIZE"});
  ExpectInvalid(With(Torchrun(), {{"WORLD_SIZE", "0"}}), {"WORLD_SIZE=0", ">= 1"});
  ExpectInvalid(With(Torchrun(), {{"LOCAL_RANK", "2"}}), {"LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"});
  ExpectInvalid(With(Torchrun(), {{"LOCAL_WORLD_SIZE", "9"}}), {"LOCAL_WORLD_SIZE=9 exceeds WORLD_SIZE=8"});
  ExpectInvalid(With(Torchrun(), {{"LOCAL_WORLD_SIZE", "-2"}}), {"LOCAL_WORLD_SIZE=-2 is negative"});
  for (const char* port : {"0", "65536", "-80", "http", "29500x"}) {
    ExpectInvalid(With(Torchrun(), {{"MASTER_PORT", port}}), {"MASTER_PORT", port, "1..65535"});
  }
  ExpectInvalid(With(Torchrun(), {{"TORCHELASTIC_USE_AGENT_STORE", "yes"}}),
                {"TORCHELASTIC_USE_AGENT_STORE='yes'", "True"});
}

// --- Open MPI ---

TEST(RankEnvironmentTest, OpenMpiOnOneNode) {
  absl::StatusOr<RankEnvironment> env = Parse(OpenMpi(2, 4, 2, 4));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, "openmpi");
  EXPECT_EQ(env->rank, 2);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 2);
  EXPECT_EQ(env->local_world_size, 4);
  EXPECT_EQ(env->master_addr, "127.0.0.1");
  EXPECT_EQ(env->master_port, 29500);
}

TEST(RankEnvironmentTest, OpenMpiOnSeveralNodesNeedsMasterAddr) {
  ExpectInvalid(OpenMpi(5, 8, 1, 4), {"MASTER_ADDR is not set", "mpirun -x MASTER_ADDR=", "-x MASTER_PORT="});
  absl::StatusOr<RankEnvironment> env =
      Parse(With(OpenMpi(5, 8, 1, 4), {{"MASTER_ADDR", "node1"}, {"MASTER_PORT", "1234"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->master_addr, "node1");
  EXPECT_EQ(env->master_port, 1234);
}

TEST(RankEnvironmentTest, OpenMpiErrors) {
  ExpectInvalid(Without(OpenMpi(0, 2, 0, 2), {"OMPI_COMM_WORLD_LOCAL_SIZE"}),
                {"openmpi", "OMPI_COMM_WORLD_LOCAL_SIZE is not", "mpirun"});
  ExpectInvalid(Without(OpenMpi(0, 2, 0, 2), {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"}),
                {"OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE are not"});
  ExpectInvalid(OpenMpi(2, 2, 0, 2), {"OMPI_COMM_WORLD_RANK=2 is not below OMPI_COMM_WORLD_SIZE=2"});
  ExpectInvalid(OpenMpi(1, 2, 1, 1), {"OMPI_COMM_WORLD_LOCAL_RANK=1 is not below OMPI_COMM_WORLD_LOCAL_SIZE=1"});
  ExpectInvalid(With(OpenMpi(0, 2, 0, 2), {{"OMPI_COMM_WORLD_SIZE", "two"}}), {"OMPI_COMM_WORLD_SIZE='two'"});
}

TEST(RankEnvironmentTest, Precedence) {
  // mpirun inside a Slurm allocation inherits the batch step's SLURM_PROCID:
  // the MPI rank wins.
  Vars mpi_in_slurm = Slurm();
  for (const auto& [name, value] : OpenMpi(3, 4, 3, 4)) mpi_in_slurm[name] = value;
  mpi_in_slurm["SLURM_PROCID"] = "0";
  absl::StatusOr<RankEnvironment> env = Parse(mpi_in_slurm);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, "openmpi");
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->master_addr, "127.0.0.1");
  EXPECT_EQ(env->master_port, 29500);  // Not Slurm's job-id port.
  // torchrun's variables win over both.
  Vars all = With(mpi_in_slurm, Torchrun());
  env = Parse(all);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, "torchrun");
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 8);
}

// --- Slurm ---

TEST(RankEnvironmentTest, Slurm) {
  absl::StatusOr<RankEnvironment> env = Parse(Slurm());
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, "slurm");
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 2);
  EXPECT_EQ(env->local_world_size, 3);  // Node 1's entry of 3,3,2.
  EXPECT_EQ(env->master_addr, "gpu007");
  EXPECT_EQ(env->master_port, 29500 + 456);  // 29500 + SLURM_JOB_ID % 1000.

  env = Parse(With(Slurm(), {{"SLURM_NODEID", "2"}, {"SLURM_LOCALID", "1"}, {"SLURM_PROCID", "7"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->local_world_size, 2);
}

TEST(RankEnvironmentTest, SlurmChoices) {
  // SLURM_NTASKS_PER_NODE beats SLURM_TASKS_PER_NODE.
  absl::StatusOr<RankEnvironment> env = Parse(With(Slurm(), {{"SLURM_NTASKS_PER_NODE", "4"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->local_world_size, 4);
  // The step's node list beats the job's; SLURM_NODELIST is the last resort.
  env = Parse(With(Slurm(), {{"SLURM_STEP_NODELIST", "gpu[008-009]"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->master_addr, "gpu008");
  env = Parse(With(Without(Slurm(), {"SLURM_JOB_NODELIST"}), {{"SLURM_NODELIST", "cn-a,cn-b"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->master_addr, "cn-a");
  // MASTER_ADDR and MASTER_PORT win when given.
  env = Parse(With(Slurm(), {{"MASTER_ADDR", "login1"}, {"MASTER_PORT", "40000"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->master_addr, "login1");
  EXPECT_EQ(env->master_port, 40000);
  // No job id: 29500.
  env = Parse(Without(Slurm(), {"SLURM_JOB_ID"}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->master_port, 29500);
  // One node: SLURM_NODEID may be absent.
  env = Parse({{"SLURM_PROCID", "1"},
               {"SLURM_NTASKS", "2"},
               {"SLURM_LOCALID", "1"},
               {"SLURM_TASKS_PER_NODE", "2"},
               {"SLURM_JOB_NODELIST", "solo"},
               {"SLURM_JOB_ID", "7"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->master_addr, "solo");
  EXPECT_EQ(env->master_port, 29507);
}

TEST(RankEnvironmentTest, SlurmErrors) {
  ExpectInvalid(Without(Slurm(), {"SLURM_NTASKS"}), {"slurm", "SLURM_NTASKS is not", "srun"});
  ExpectInvalid(Without(Slurm(), {"SLURM_LOCALID"}), {"SLURM_LOCALID is not"});
  ExpectInvalid(Without(Slurm(), {"SLURM_TASKS_PER_NODE"}), {"SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE is not"});
  ExpectInvalid(Without(Slurm(), {"SLURM_NODEID"}), {"SLURM_TASKS_PER_NODE='3(x2),2' lists 3 nodes", "SLURM_NODEID"});
  ExpectInvalid(With(Slurm(), {{"SLURM_NODEID", "3"}}), {"SLURM_NODEID=3 is out of range", "below 3"});
  ExpectInvalid(With(Slurm(), {{"SLURM_NODEID", "x"}}), {"SLURM_NODEID='x'"});
  ExpectInvalid(With(Slurm(), {{"SLURM_TASKS_PER_NODE", "3(x"}}), {"SLURM_TASKS_PER_NODE='3(x'", "2(x3)"});
  ExpectInvalid(With(Slurm(), {{"SLURM_NTASKS_PER_NODE", "0"}}), {"SLURM_NTASKS_PER_NODE=0", ">= 1"});
  ExpectInvalid(With(Slurm(), {{"SLURM_LOCALID", "3"}}), {"SLURM_LOCALID=3 is not below SLURM_TASKS_PER_NODE=3"});
  ExpectInvalid(With(Slurm(), {{"SLURM_PROCID", "8"}}), {"SLURM_PROCID=8 is not below SLURM_NTASKS=8"});
  ExpectInvalid(With(Slurm(), {{"SLURM_JOB_NODELIST", "gpu[007-"}}), {"SLURM_JOB_NODELIST='gpu[007-'", "MASTER_ADDR"});
  ExpectInvalid(Without(Slurm(), {"SLURM_JOB_NODELIST"}), {"SLURM_JOB_NODELIST", "MASTER_ADDR"});
  ExpectInvalid(With(Slurm(), {{"SLURM_JOB_ID", "12a"}}), {"SLURM_JOB_ID='12a'", "MASTER_PORT"});
}

// --- nothing ---

TEST(RankEnvironmentTest, NothingSetListsEveryLauncher) {
  ExpectError({{"PATH", "/bin"}, {"LOCAL_RANK", "0"}}, absl::StatusCode::kNotFound,
              {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "torchrun", "OMPI_COMM_WORLD_RANK",
               "OMPI_COMM_WORLD_LOCAL_SIZE", "mpirun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_NODELIST", "srun"});
  // Inside an allocation but not in a step.
  ExpectError({{"SLURM_JOB_ID", "42"}}, absl::StatusCode::kNotFound, {"SLURM_JOB_ID is set", "srun"});
}

TEST(RankEnvironmentTest, ProcessEnvironmentOverload) {
  // Bazel's test environment sets none of the launchers' variables, so this
  // is either NotFound or (under a launcher) a parsed environment.
  absl::StatusOr<RankEnvironment> env = RankEnvironmentFromEnv();
  if (!env.ok()) {
    EXPECT_EQ(env.status().code(), absl::StatusCode::kNotFound) << env.status();
  }
}

// --- host lists ---

std::vector<std::string> Expand(const std::string& list) {
  absl::StatusOr<std::vector<std::string>> hosts = ExpandSlurmNodelist(list);
  EXPECT_TRUE(hosts.ok()) << list << ": " << hosts.status();
  return hosts.ok() ? *hosts : std::vector<std::string>{};
}

TEST(ExpandSlurmNodelistTest, Expands) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Expand("node[01-03,7],gpu-a"), (V{"node01", "node02", "node03", "node7", "gpu-a"}));
  EXPECT_EQ(Expand("solo"), (V{"solo"}));
  EXPECT_EQ(Expand("a,b.example.com"), (V{"a", "b.example.com"}));
  EXPECT_EQ(Expand("n[8-10]"), (V{"n8", "n9", "n10"}));
  EXPECT_EQ(Expand("n[098-101]"), (V{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(Expand("n[5]"), (V{"n5"}));
  EXPECT_EQ(Expand("x[1-2]-ib"), (V{"x1-ib", "x2-ib"}));
  EXPECT_EQ(Expand("r[1-2]n[8-9]"), (V{"r1n8", "r1n9", "r2n8", "r2n9"}));
  EXPECT_EQ(Expand("a[1-2],b[3],c"), (V{"a1", "a2", "b3", "c"}));
  EXPECT_EQ(Expand("gpu-[0001-0003]").size(), 3u);
}

TEST(ExpandSlurmNodelistTest, RejectsMalformedLists) {
  for (const char* bad : {"", "n[1-", "n]1[", "n[]", "n[3-1]", "n[a-b]", "n[[1]]", "a,,b", "a,", "[1-2]", "n[1,,2]",
                          "n[1-]", "n[-1]", "n[1--3]", "n[0-99999999]"}) {
    EXPECT_FALSE(ExpandSlurmNodelist(bad).ok()) << "accepted '" << bad << "'";
  }
}

TEST(ExpandSlurmTasksPerNodeTest, Expands) {
  EXPECT_EQ(*ExpandSlurmTasksPerNode("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(*ExpandSlurmTasksPerNode("4"), (std::vector<int>{4}));
  EXPECT_EQ(*ExpandSlurmTasksPerNode("1,2(x2)"), (std::vector<int>{1, 2, 2}));
  for (const char* bad : {"", "2(x0)", "x", "2(3)", "2,", "2(x3", "(x3)", "-1", "2(x-1)", "2(x999999999)"}) {
    EXPECT_FALSE(ExpandSlurmTasksPerNode(bad).ok()) << "accepted '" << bad << "'";
  }
}

}  // namespace
}  // namespace lockstep
