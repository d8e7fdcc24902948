#include "tools/launch/rendezvous.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "collectives/store/hash_store.h"
#include "gtest/gtest.h"
#include "tools/launch/group_state.h"
#include "tools/launch/worker_env.h"

namespace lockstep {
namespace launch {
namespace {

using std::chrono::milliseconds;

RendezvousOptions Options(const std::string& backend, int min_nodes, int max_nodes, int node_rank, int local) {
  RendezvousOptions o;
  o.backend = backend;
  o.min_nodes = min_nodes;
  o.max_nodes = max_nodes;
  o.node_rank = node_rank;
  o.local_world_size = local;
  o.host = "10.0.0." + std::to_string(node_rank + 1);
  o.hostname = "node" + std::to_string(node_rank);
  o.join_timeout = milliseconds(20000);  // Bounds a broken test; never reached when it passes.
  o.last_call_timeout = milliseconds(300);
  o.poll_interval = milliseconds(10);
  return o;
}

absl::StatusOr<int> Port4242(const std::string&) { return 4242; }

// Joins attempt `attempt` for every agent at once (one thread each).
std::vector<absl::StatusOr<GroupAssignment>> JoinAll(std::vector<Rendezvous*> agents, int attempt) {
  std::vector<absl::StatusOr<GroupAssignment>> results(agents.size(), absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < agents.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = agents[i]->Join(attempt, Port4242); });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

TEST(RendezvousTest, StaticGroupRanksOffsetsAndMaster) {
  HashStore store;
  const int local[] = {2, 1, 3};
  std::vector<std::unique_ptr<Rendezvous>> agents;
  // Node ranks given in another order than they will come.
  for (int r : {2, 0, 1}) agents.push_back(std::make_unique<Rendezvous>(&store, Options("static", 3, 3, r, local[r])));
  auto results = JoinAll({agents[0].get(), agents[1].get(), agents[2].get()}, 0);
  std::map<int, GroupAssignment> by_rank;
  for (auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status();
    by_rank[r->group_rank] = *r;
  }
  ASSERT_EQ(by_rank.size(), 3u);
  EXPECT_EQ(by_rank[0].rank_offset, 0);
  EXPECT_EQ(by_rank[1].rank_offset, 2);
  EXPECT_EQ(by_rank[2].rank_offset, 3);
  for (auto& [rank, g] : by_rank) {
    EXPECT_EQ(g.world_size, 6);
    EXPECT_EQ(g.group_world_size, 3);
    EXPECT_EQ(g.master_addr, "10.0.0.1");  // Node rank 0's host.
    EXPECT_EQ(g.master_port, 4242);
    EXPECT_EQ(g.worker_token, by_rank[0].worker_token);
    EXPECT_EQ(g.worker_token.size(), 32u);
    EXPECT_EQ(g.nodes[2].hostname, "node2");
  }
  auto again = JoinAll({agents[0].get(), agents[1].get(), agents[2].get()}, 1);
  ASSERT_TRUE(again[0].ok()) << again[0].status();
  EXPECT_EQ(again[0]->attempt, 1);
  EXPECT_EQ(again[0]->group_rank, 2);
  EXPECT_NE(again[0]->worker_token, by_rank[0].worker_token);  // Fresh per attempt.
}

// With a join token the workers' token is never in the store: every agent
// derives the same one from the token and the master record's nonce, a
// reader of the store's keys without the token cannot, and another token
// gives another workers' token.
TEST(RendezvousTest, WithAJoinTokenTheWorkersTokenIsDerivedNotStored) {
  std::map<std::string, std::string> tokens;
  for (const std::string join_token : {"s3cret", "other"}) {
    HashStore store;
    std::vector<std::unique_ptr<Rendezvous>> agents;
    for (int r : {0, 1}) {
      RendezvousOptions o = Options("static", 2, 2, r, 1);
      o.join_token = join_token;
      agents.push_back(std::make_unique<Rendezvous>(&store, o));
    }
    auto results = JoinAll({agents[0].get(), agents[1].get()}, 0);
    ASSERT_TRUE(results[0].ok()) << results[0].status();
    ASSERT_TRUE(results[1].ok()) << results[1].status();
    const std::string token = results[0]->worker_token;
    EXPECT_EQ(results[1]->worker_token, token);
    EXPECT_EQ(token.size(), 32u);
    absl::StatusOr<std::string> master = store.Get("a0/master", milliseconds(1000));
    ASSERT_TRUE(master.ok()) << master.status();
    EXPECT_EQ(master->find(token), std::string::npos) << *master;
    tokens[join_token] = token;
  }
  EXPECT_NE(tokens["s3cret"], tokens["other"]);
}

TEST(RendezvousTest, StaticNodeRankTakenTwiceIsRefused) {
  HashStore store;
  Rendezvous first(&store, Options("static", 2, 2, 1, 1));
  RendezvousOptions o = Options("static", 2, 2, 1, 1);
  o.hostname = "intruder";
  o.join_timeout = milliseconds(100);
  Rendezvous second(&store, o);
  absl::StatusOr<GroupAssignment> a = second.Join(0, Port4242);  // Claims rank 1, then times out.
  EXPECT_EQ(a.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(a.status().message().find("only 1 of 2 nodes joined within 0.1 s (missing node ranks: 0)"),
            std::string::npos)
      << a.status();
  absl::StatusOr<GroupAssignment> b = first.Join(0, Port4242);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(b.status().message().find("node rank 1 is already taken by host intruder (10.0.0.2)"), std::string::npos)
      << b.status();
}

TEST(RendezvousTest, C10dRanksByArrivalStayAcrossAttempts) {
  HashStore store;
  std::vector<std::unique_ptr<Rendezvous>> agents;
  for (int i = 0; i < 3; ++i) agents.push_back(std::make_unique<Rendezvous>(&store, Options("c10d", 3, 3, i, 2)));
  std::vector<Rendezvous*> all = {agents[0].get(), agents[1].get(), agents[2].get()};
  auto first = JoinAll(all, 0);
  std::map<int64_t, int> rank_of_agent;
  std::set<int> ranks;
  for (size_t i = 0; i < first.size(); ++i) {
    ASSERT_TRUE(first[i].ok()) << first[i].status();
    EXPECT_EQ(first[i]->world_size, 6);
    EXPECT_EQ(first[i]->rank_offset, first[i]->group_rank * 2);
    EXPECT_EQ(first[i]->group_rank, all[i]->agent_id());  // Arrival order.
    rank_of_agent[all[i]->agent_id()] = first[i]->group_rank;
    ranks.insert(first[i]->group_rank);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2}));
  auto second = JoinAll(all, 1);
  for (size_t i = 0; i < second.size(); ++i) {
    ASSERT_TRUE(second[i].ok()) << second[i].status();
    EXPECT_EQ(second[i]->group_rank, rank_of_agent[all[i]->agent_id()]);
  }
}

TEST(RendezvousTest, C10dMinMaxFormsAfterTheLastCallAndTakesLateNodesInTheNextRound) {
  HashStore store;
  Rendezvous a(&store, Options("c10d", 2, 3, 0, 1));
  Rendezvous b(&store, Options("c10d", 2, 3, 1, 1));
  auto round0 = JoinAll({&a, &b}, 0);  // MIN 2 came, MAX 3 did not: the window (300 ms) closes it.
  ASSERT_TRUE(round0[0].ok()) << round0[0].status();
  ASSERT_TRUE(round0[1].ok()) << round0[1].status();
  EXPECT_EQ(round0[0]->group_world_size, 2);
  EXPECT_EQ(round0[1]->group_world_size, 2);

  // A third node comes late: it announces itself in round 0 and waits in round 1.
  Rendezvous late(&store, Options("c10d", 2, 3, 2, 1));
  absl::StatusOr<GroupAssignment> late_group = absl::UnknownError("not run");
  std::thread late_thread([&] { late_group = late.Join(0, Port4242); });
  ASSERT_TRUE(store.Wait({"a0/waiting"}, milliseconds(20000)).ok());
  GroupState members_view(&store, *round0[0], a.agent_id());
  EXPECT_EQ(*members_view.NodesWaiting(), 1);
  // The members re-form the group: round 1 has all three (MAX: no window).
  auto round1 = JoinAll({&a, &b}, 1);
  late_thread.join();
  ASSERT_TRUE(late_group.ok()) << late_group.status();
  EXPECT_EQ(late_group->attempt, 1);
  EXPECT_EQ(late_group->group_world_size, 3);
  EXPECT_EQ(late_group->group_rank, 2);  // Arrived last.
  ASSERT_TRUE(round1[0].ok()) << round1[0].status();
  EXPECT_EQ(round1[0]->group_rank, round0[0]->group_rank);  // Stable.
  EXPECT_EQ(round1[0]->world_size, 3);

  // Without admitting late nodes, one is refused with what to do.
  RendezvousOptions o = Options("c10d", 2, 3, 3, 1);
  o.admit_late_nodes = false;
  HashStore store2;
  Rendezvous x(&store2, Options("c10d", 1, 3, 0, 1));
  ASSERT_TRUE(x.Join(0, Port4242).ok());  // Alone after the window.
  Rendezvous refused(&store2, o);
  absl::StatusOr<GroupAssignment> r = refused.Join(0, Port4242);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("came after the group closed"), std::string::npos) << r.status();
}

TEST(RendezvousTest, C10dTooFewNodesTimesOutNamingTheCount) {
  HashStore store;
  RendezvousOptions o = Options("c10d", 2, 2, 0, 1);
  o.join_timeout = milliseconds(100);
  Rendezvous a(&store, o);
  absl::StatusOr<GroupAssignment> g = a.Join(0, Port4242);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(g.status().message().find("only 1 of at least 2 nodes joined within 0.1 s"), std::string::npos)
      << g.status();
}

GroupAssignment TwoNodes() {
  GroupAssignment g;
  g.attempt = 3;
  g.group_rank = 1;
  g.group_world_size = 2;
  g.rank_offset = 2;
  g.world_size = 4;
  g.nodes = {NodeInfo{0, "10.0.0.1", "node0", 2}, NodeInfo{1, "10.0.0.2", "node1", 2}};
  g.master_addr = "10.0.0.1";
  g.master_port = 31000;
  g.worker_token = "0123456789abcdef0123456789abcdef";
  return g;
}

TEST(GroupStateTest, FirstFailureWinsAndRoundTrips) {
  HashStore store;
  GroupState state(&store, TwoNodes(), 1);
  EXPECT_FALSE(state.Failure()->has_value());
  FailureRecord first;
  first.rank = 3;
  first.local_rank = 1;
  first.group_rank = 1;
  first.hostname = "node1";
  first.host = "10.0.0.2";
  first.what = "exited with code 7";
  first.exit_code = 7;
  first.tail = "line \xff one\nline two\n";  // Not UTF-8: replaced, not thrown.
  ASSERT_TRUE(state.PublishFailure(first).ok());
  FailureRecord second = first;
  second.rank = 0;
  ASSERT_TRUE(state.PublishFailure(second).ok());
  absl::StatusOr<std::optional<FailureRecord>> got = state.Failure();
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status();
  EXPECT_EQ((*got)->rank, 3);
  EXPECT_EQ((*got)->exit_code, 7);
  EXPECT_EQ((*got)->what, "exited with code 7");
  EXPECT_NE((*got)->tail.find("line two\n"), std::string::npos);
  const std::string summary = FailureSummary(**got, 3, 3);
  EXPECT_NE(summary.find("first failure: rank 3 (local_rank 1, node rank 1) on host node1 (10.0.0.2)"),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find("exited with code 7"), std::string::npos);
  EXPECT_FALSE(DecodeFailure("{\"rank\": \"x\"}").ok());
  EXPECT_FALSE(DecodeFailure("garbage").ok());
}

TEST(GroupStateTest, HeartbeatsDoneAndExited) {
  HashStore store;
  GroupAssignment g = TwoNodes();
  GroupState node0(&store, g, 0);
  GroupState node1(&store, g, 1);
  // Timeout 0: a counter that has not moved since the last look is stale.
  ASSERT_TRUE(node1.Heartbeat().ok());
  EXPECT_FALSE(node0.StaleAgent(milliseconds(0))->has_value());  // First look: it moved (from nothing).
  absl::StatusOr<std::optional<NodeInfo>> stale = node0.StaleAgent(milliseconds(0));
  ASSERT_TRUE(stale.ok() && stale->has_value());
  EXPECT_EQ((*stale)->hostname, "node1");
  ASSERT_TRUE(node1.Heartbeat().ok());
  EXPECT_FALSE(node0.StaleAgent(milliseconds(0))->has_value());
  EXPECT_FALSE(node0.StaleAgent(milliseconds(60000))->has_value());

  EXPECT_FALSE(*node0.WaitAllDone(milliseconds(1)));
  ASSERT_TRUE(node0.MarkDone().ok());
  EXPECT_FALSE(*node1.WaitAllDone(milliseconds(1)));
  ASSERT_TRUE(node1.MarkDone().ok());
  EXPECT_TRUE(*node0.WaitAllDone(milliseconds(1)));
  ASSERT_TRUE(node1.MarkExited().ok());
  EXPECT_EQ(node0.WaitAllExited(milliseconds(1)).code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(node0.MarkExited().ok());
  EXPECT_TRUE(node0.WaitAllExited(milliseconds(1)).ok());
}

TEST(GroupStateTest, AgentThatDoesNotLeaveIsLost) {
  HashStore store;
  GroupAssignment g = TwoNodes();
  GroupState node0(&store, g, 0);
  GroupState node1(&store, g, 1);
  // Node 1 has not said it saw the failure: after the timeout it is lost.
  absl::StatusOr<std::vector<NodeInfo>> silent = node0.WaitOthersLeft(milliseconds(1));
  ASSERT_TRUE(silent.ok()) << silent.status();
  ASSERT_EQ(silent->size(), 1u);
  EXPECT_EQ((*silent)[0].hostname, "node1");
  // Once found lost it is neither waited for again nor for its goodbye.
  silent = node0.WaitOthersLeft(milliseconds(1));
  ASSERT_TRUE(silent.ok() && silent->empty());
  ASSERT_TRUE(node0.MarkExited().ok());
  EXPECT_TRUE(node0.WaitAllExited(milliseconds(1)).ok());
  // An agent that said it left is alive.
  ASSERT_TRUE(node0.MarkLeft().ok());
  silent = node1.WaitOthersLeft(milliseconds(1));
  ASSERT_TRUE(silent.ok() && silent->empty());
}

TEST(GroupStateTest, SummaryNamesTheLikelyCauseAndWhyTheJobEnded) {
  JobFailure job;
  FailureRecord worker;
  worker.rank = 0;
  worker.local_rank = 0;
  worker.group_rank = 0;
  worker.hostname = "node0";
  worker.host = "10.0.0.1";
  worker.what = "exited with code 1";
  worker.exit_code = 1;
  worker.tail = "peer vanished\n";
  job.first = worker;
  FailureRecord agent;
  agent.group_rank = 1;
  agent.hostname = "node1";
  agent.host = "10.0.0.2";
  agent.what = "it did not answer";
  agent.agent_lost = true;
  job.likely_cause = agent;
  job.ended = "rendezvous (static, attempt 1): only 1 of 2 nodes joined (missing node ranks: 1)";
  const std::string summary = FailureSummary(job, 1, 1);
  EXPECT_NE(summary.find("FAILED (restarts used: 1 of 1)"), std::string::npos) << summary;
  EXPECT_NE(summary.find("first failure: rank 0 (local_rank 0, node rank 0) on host node0 (10.0.0.1)"),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find("peer vanished"), std::string::npos) << summary;
  EXPECT_NE(summary.find("likely cause: the agent of node rank 1 on host node1 (10.0.0.2): it did not answer"),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find("the job ended: rendezvous (static, attempt 1)"), std::string::npos) << summary;
  // No attempt ran: the summary still says why the job ended.
  JobFailure none;
  none.ended = "rendezvous timed out";
  const std::string empty = FailureSummary(none, 0, 3);
  EXPECT_NE(empty.find("first failure: none"), std::string::npos) << empty;
  EXPECT_NE(empty.find("the job ended: rendezvous timed out"), std::string::npos) << empty;
  EXPECT_EQ(DescribeFailure(agent), "the agent of node rank 1 on host node1 (10.0.0.2): it did not answer");
}

TEST(WorkerEnvTest, TorchrunsVariables) {
  WorkerEnvOptions o;
  o.role = "trainer";
  o.run_id = "job";
  o.max_restarts = 5;
  o.restart_count = 2;
  o.set_omp_num_threads = true;
  std::map<std::string, std::string> env;
  for (const auto& [k, v] : WorkerEnvironment(TwoNodes(), 1, o)) env[k] = v;
  const std::map<std::string, std::string> expected = {
      {"LOCAL_RANK", "1"},
      {"RANK", "3"},
      {"GROUP_RANK", "1"},
      {"ROLE_RANK", "3"},
      {"ROLE_NAME", "trainer"},
      {"LOCAL_WORLD_SIZE", "2"},
      {"WORLD_SIZE", "4"},
      {"GROUP_WORLD_SIZE", "2"},
      {"ROLE_WORLD_SIZE", "4"},
      {"MASTER_ADDR", "10.0.0.1"},
      {"MASTER_PORT", "31000"},
      {"TORCHELASTIC_RESTART_COUNT", "2"},
      {"TORCHELASTIC_MAX_RESTARTS", "5"},
      {"TORCHELASTIC_RUN_ID", "job"},
      {"LOCKSTEP_STORE_TOKEN", "0123456789abcdef0123456789abcdef"},
      {"OMP_NUM_THREADS", "1"},
  };
  EXPECT_EQ(env, expected);
}

}  // namespace
}  // namespace launch
}  // namespace lockstep
