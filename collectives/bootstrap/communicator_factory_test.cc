// The automatic transport choice, with threads as ranks and host identities
// given as options: one host -> shared memory, one rank per host -> TCP,
// mixed -> hierarchical (shared memory inside, TCP across), each computing
// exact results; forcing a transport, and the errors when ranks disagree or
// shared memory is forced across hosts; the environment's overrides.
#include "collectives/bootstrap/communicator_factory.h"

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/store/hash_store.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

// An environment of `vars` (read when looked up, so later changes show).
EnvLookup LookupIn(const std::map<std::string, std::string>& vars) {
  return [&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

CommunicatorFactoryOptions TestOptions() {
  CommunicatorFactoryOptions o;
  o.communicator.timeout = Milliseconds(60000);
  o.communicator.failure_report_window = Milliseconds(200);
  o.tcp.timeout = Milliseconds(60000);
  o.shm.timeout = Milliseconds(60000);
  return o;
}

absl::StatusOr<Tensor> Full(int64_t count, float value) {
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({count}, DType::kF32));
  for (int64_t i = 0; i < count; ++i) t.data<float>()[i] = value;
  return t;
}

struct RankResult {
  absl::Status status;
  std::string name;  // capabilities().name
};

// Builds a group with rank r on host hosts[r] (and asking for transports[r],
// if given), runs AllReduce, Reduce, Broadcast, AllGather and Barrier with
// exact checks.
std::vector<RankResult> RunGroup(const std::vector<std::string>& hosts, const std::vector<std::string>& transports = {},
                                 CommunicatorFactoryOptions base = TestOptions()) {
  const int n = static_cast<int>(hosts.size());
  auto store = std::make_shared<HashStore>();
  store->set_timeout(Milliseconds(60000));
  std::vector<RankResult> results(n);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      CommunicatorFactoryOptions options = base;
      options.host_id = hosts[rank];
      if (!transports.empty()) options.transport = transports[rank];
      results[rank].status = [&]() -> absl::Status {
        LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, CreateCommunicator(store, rank, n, options));
        results[rank].name = comm->capabilities().name;
        const float expected_sum = static_cast<float>(n * (n + 1) / 2);
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Full(100003, static_cast<float>(rank + 1)));
        LOCKSTEP_RETURN_IF_ERROR(comm->AllReduce(t, ReduceOp::kSum)->Wait());
        for (int64_t i = 0; i < t.numel(); i += 997) {
          if (t.data<float>()[i] != expected_sum) {
            return absl::InternalError(absl::StrCat("all_reduce element ", i, ": ", t.data<float>()[i]));
          }
        }
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor in, Full(9, static_cast<float>(rank + 1)));
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros({9}, DType::kF32));
        LOCKSTEP_RETURN_IF_ERROR(comm->Reduce(in, out, ReduceOp::kMax, n - 1)->Wait());
        if (rank == n - 1 && out.data<float>()[8] != static_cast<float>(n)) {
          return absl::InternalError(absl::StrCat("reduce ", out.data<float>()[8]));
        }
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor b, Full(5, static_cast<float>(rank)));
        LOCKSTEP_RETURN_IF_ERROR(comm->Broadcast(b, n / 2)->Wait());
        if (b.data<float>()[4] != static_cast<float>(n / 2)) return absl::InternalError("broadcast");
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor all, Tensor::Zeros({n}, DType::kF32));
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine, Full(1, static_cast<float>(rank)));
        LOCKSTEP_RETURN_IF_ERROR(comm->AllGather(mine, all)->Wait());
        for (int k = 0; k < n; ++k) {
          if (all.data<float>()[k] != static_cast<float>(k)) return absl::InternalError("all_gather");
        }
        return comm->Barrier()->Wait();
      }();
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

void ExpectAll(const std::vector<RankResult>& results, const std::string& name) {
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_TRUE(results[r].status.ok()) << "rank " << r << ": " << results[r].status;
    EXPECT_EQ(results[r].name, name) << "rank " << r;
  }
}

TEST(CommunicatorFactoryTest, OneHostUsesSharedMemory) { ExpectAll(RunGroup({"h", "h", "h"}), "host over shm"); }

TEST(CommunicatorFactoryTest, OneRankPerHostUsesTcp) { ExpectAll(RunGroup({"a", "b", "c"}), "host over tcp"); }

TEST(CommunicatorFactoryTest, MixedHostsRunHierarchically) {
  ExpectAll(RunGroup({"a", "a", "b", "b"}), "hierarchical(shm+tcp)");
  ExpectAll(RunGroup({"a", "b", "b", "a", "b"}), "hierarchical(shm+tcp)");
  // Fingerprints travel over the flat level.
  CommunicatorFactoryOptions checked = TestOptions();
  checked.communicator.debug_checks = true;
  ExpectAll(RunGroup({"a", "a", "b", "b"}, {}, checked), "hierarchical(shm+tcp)");
}

TEST(CommunicatorFactoryTest, LocalTransportTcpPutsTcpInsideHosts) {
  CommunicatorFactoryOptions options = TestOptions();
  options.local_transport = "tcp";
  ExpectAll(RunGroup({"a", "a", "b", "b"}, {}, options), "hierarchical(tcp+tcp)");
}

TEST(CommunicatorFactoryTest, OneRankGroups) {
  ExpectAll(RunGroup({"a"}), "host over shm");
  ExpectAll(RunGroup({"a"}, {"tcp"}), "host over tcp");
}

TEST(CommunicatorFactoryTest, TcpCanBeForcedOnOneHost) {
  ExpectAll(RunGroup({"h", "h"}, {"tcp", "tcp"}), "host over tcp");
}

TEST(CommunicatorFactoryTest, SharedMemoryForcedAcrossHostsFailsOnEveryRank) {
  std::vector<RankResult> results = RunGroup({"a", "a", "b"}, {"shm", "shm", "shm"});
  for (size_t r = 0; r < results.size(); ++r) {
    ASSERT_FALSE(results[r].status.ok()) << "rank " << r;
    EXPECT_EQ(results[r].status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(results[r].status.message().find("run on 2 hosts (ranks by host: {0,1} {2}"), absl::string_view::npos)
        << results[r].status;
    EXPECT_NE(results[r].status.message().find("use auto or tcp"), absl::string_view::npos) << results[r].status;
  }
}

TEST(CommunicatorFactoryTest, RanksThatAskForDifferentTransportsFailNamingThem) {
  std::vector<RankResult> results = RunGroup({"h", "h"}, {"auto", "tcp"});
  for (size_t r = 0; r < results.size(); ++r) {
    ASSERT_FALSE(results[r].status.ok()) << "rank " << r;
    EXPECT_NE(results[r].status.message().find("rank 0 asks for transport 'auto' but rank 1 for 'tcp'"),
              absl::string_view::npos)
        << results[r].status;
  }
}

TEST(CommunicatorFactoryTest, BadOptionsAreNamed) {
  auto store = std::make_shared<HashStore>();
  CommunicatorFactoryOptions options = TestOptions();
  options.transport = "infiniband";
  absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateCommunicator(store, 0, 1, options);
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("transport is 'infiniband'; expected auto, tcp or shm"),
            absl::string_view::npos)
      << comm.status();
  options = TestOptions();
  options.local_transport = "auto";
  EXPECT_FALSE(CreateCommunicator(store, 0, 1, options).ok());
  options = TestOptions();
  options.host_id = "a|b";
  EXPECT_FALSE(CreateCommunicator(store, 0, 1, options).ok());
  EXPECT_FALSE(CreateCommunicator(store, 1, 1, TestOptions()).ok());
  options = TestOptions();
  options.algorithms.link = LinkConstants{-1, 0, 0};
  comm = CreateCommunicator(store, 0, 1, options);
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("AlgorithmOptions.link.latency_us is -1"), absl::string_view::npos)
      << comm.status();
  options = TestOptions();
  options.algorithms.ranks_per_host = 0;
  comm = CreateCommunicator(store, 0, 1, options);
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("AlgorithmOptions.ranks_per_host is 0"), absl::string_view::npos)
      << comm.status();
  options = TestOptions();
  options.algorithms.link = LinkConstants{50, 0, 0, -1};
  comm = CreateCommunicator(store, 0, 1, options);
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("AlgorithmOptions.link.message_us is -1"), absl::string_view::npos)
      << comm.status();
  options = TestOptions();
  options.algorithms.cores_per_host = -1;
  comm = CreateCommunicator(store, 0, 1, options);
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("AlgorithmOptions.cores_per_host is -1"), absl::string_view::npos)
      << comm.status();
}

TEST(CommunicatorFactoryTest, AForgedOrForeignAnnouncementIsNamedAndNothingIsBuilt) {
  // Rank 0's place in the store holds what another program, an older
  // lockstep or a forger wrote; rank 1 fails naming rank 0 and what it
  // expected, within the short timeout, and builds no group.
  const std::pair<const char*, const char*> cases[] = {
      {"tcp|node0", "expected '<transport>;<algorithms>|<identity>'"},
      {"tcp;all_reduce=pat,small=262144|node0", "rank 0 published algorithm choices"},
      {"tcp;all_reduce=ring,small=lots|node0", "small is not a byte count"},
      {"tcp;all_reduce=ring,small=1,link=1:x:1:1|node0", "a link constant is not a number"},
      {"tcp;all_reduce=ring,small=1,link=-1:1:1:1|node0", "AlgorithmOptions.link.latency_us is -1"},
      {"tcp;all_reduce=ring,small=1,link=1:1:1|node0", "link has not 4 numbers"},
      {"tcp;all_reduce=ring,small=1,cores=x|node0", "cores is not a count"},
      {"tcp;all_reduce=ring,small=1,cores=-2|node0", "AlgorithmOptions.cores_per_host is -2"},
      {"tcp;all_reduce=ring,small=1,speed=9|node0", "unknown field 'speed'"},
  };
  for (const auto& [published, want] : cases) {
    auto store = std::make_shared<HashStore>();
    ASSERT_TRUE(store->Set("comm/host/0", published).ok());
    ASSERT_TRUE(store->Set("comm/host_read/0", "1").ok());
    CommunicatorFactoryOptions options = TestOptions();
    options.host_id = "node1";
    options.tcp.timeout = Milliseconds(5000);
    absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateCommunicator(store, 1, 2, options);
    ASSERT_FALSE(comm.ok()) << published;
    EXPECT_EQ(comm.status().code(), absl::StatusCode::kDataLoss) << published << ": " << comm.status();
    EXPECT_NE(comm.status().message().find(want), absl::string_view::npos) << published << ": " << comm.status();
  }
}

TEST(CommunicatorFactoryTest, TheEnvironmentForcesTransportAndHost) {
  std::map<std::string, std::string> vars = {{"LOCKSTEP_TRANSPORT", "tcp"}, {"LOCKSTEP_HOST_ID", "node9"}};
  EnvLookup env = LookupIn(vars);
  CommunicatorFactoryOptions options;
  ASSERT_TRUE(ApplyTransportEnvironment(env, &options).ok());
  EXPECT_EQ(options.transport, "tcp");
  EXPECT_EQ(options.host_id, "node9");
  // An explicit choice wins over the environment.
  options = CommunicatorFactoryOptions();
  options.transport = "shm";
  options.host_id = "mine";
  ASSERT_TRUE(ApplyTransportEnvironment(env, &options).ok());
  EXPECT_EQ(options.transport, "shm");
  EXPECT_EQ(options.host_id, "mine");
  vars["LOCKSTEP_TRANSPORT"] = "udp";
  options = CommunicatorFactoryOptions();
  absl::Status s = ApplyTransportEnvironment(env, &options);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("LOCKSTEP_TRANSPORT='udp'"), absl::string_view::npos) << s;
}

TEST(CommunicatorFactoryTest, EveryRankRunsRankZerosAlgorithmChoice) {
  // Rank 0 forces Rabenseifner's all-reduce at every size; the others ask
  // for the ring above 1 MiB. Had each kept its own, the group would wait
  // on steps nobody sends; all run rank 0's.
  constexpr int kRanks = 4;
  constexpr int64_t kCount = 1000;
  auto store = std::make_shared<HashStore>();
  store->set_timeout(Milliseconds(60000));
  std::vector<absl::Status> results(kRanks);
  std::vector<std::string> chosen(kRanks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kRanks; ++rank) {
    threads.emplace_back([&, rank] {
      CommunicatorFactoryOptions options = TestOptions();
      options.host_id = absl::StrCat("node", rank);
      options.algorithms.all_reduce = rank == 0 ? AllReduceAlgorithm::kRabenseifner : AllReduceAlgorithm::kRing;
      options.algorithms.small_message_bytes = rank == 0 ? 0 : 1 << 20;
      if (rank != 0) options.algorithms.link = LinkConstants{1, 1, 1};
      results[rank] = [&]() -> absl::Status {
        LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, CreateCommunicator(store, rank, kRanks, options));
        chosen[rank] = comm->AllReduceAlgorithm(kCount, DType::kF32);
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Full(kCount, static_cast<float>(rank + 1)));
        LOCKSTEP_RETURN_IF_ERROR(comm->AllReduce(t, ReduceOp::kSum)->Wait());
        for (int64_t i = 0; i < kCount; ++i) {
          if (t.data<float>()[i] != 10.0f) {
            return absl::InternalError(absl::StrCat("element ", i, " is ", t.data<float>()[i], ", expected 10"));
          }
        }
        return comm->Barrier()->Wait();
      }();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int rank = 0; rank < kRanks; ++rank) {
    EXPECT_TRUE(results[rank].ok()) << "rank " << rank << ": " << results[rank];
    EXPECT_EQ(chosen[rank], "rabenseifner") << "rank " << rank;
  }
}

TEST(CommunicatorFactoryTest, LockstepAlgoForcesTheAllReduceAlgorithm) {
  std::map<std::string, std::string> vars;
  EnvLookup env = LookupIn(vars);
  CommunicatorFactoryOptions options;
  ASSERT_TRUE(ApplyTransportEnvironment(env, &options).ok());
  EXPECT_EQ(options.algorithms.all_reduce, AllReduceAlgorithm::kAuto);
  for (auto [name, algorithm] : {std::pair<const char*, AllReduceAlgorithm>{"ring", AllReduceAlgorithm::kRing},
                                 {"recursive_doubling", AllReduceAlgorithm::kRecursiveDoubling},
                                 {"rabenseifner", AllReduceAlgorithm::kRabenseifner}}) {
    vars["LOCKSTEP_ALGO"] = name;
    options = CommunicatorFactoryOptions();
    ASSERT_TRUE(ApplyTransportEnvironment(env, &options).ok());
    EXPECT_EQ(options.algorithms.all_reduce, algorithm) << name;
  }
  // An explicit choice wins over the environment.
  options = CommunicatorFactoryOptions();
  options.algorithms.all_reduce = AllReduceAlgorithm::kRing;
  ASSERT_TRUE(ApplyTransportEnvironment(env, &options).ok());
  EXPECT_EQ(options.algorithms.all_reduce, AllReduceAlgorithm::kRing);
  vars["LOCKSTEP_ALGO"] = "nvls";
  options = CommunicatorFactoryOptions();
  const absl::Status s = ApplyTransportEnvironment(env, &options);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("LOCKSTEP_ALGO='nvls'"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("rabenseifner"), absl::string_view::npos) << s;
}

TEST(CommunicatorFactoryTest, RuntimeConnectZeroBuildsTheFullMesh) {
  std::map<std::string, std::string> vars;
  EnvLookup env = LookupIn(vars);
  CommunicatorFactoryOptions options;
  ASSERT_TRUE(ApplyTransportEnvironment(env, &options).ok());
  EXPECT_FALSE(options.tcp.full_mesh);  // On first use by default.
  vars["LOCKSTEP_RUNTIME_CONNECT"] = "0";
  ASSERT_TRUE(ApplyTransportEnvironment(env, &options).ok());
  EXPECT_TRUE(options.tcp.full_mesh);
  vars["LOCKSTEP_RUNTIME_CONNECT"] = "yes";
  const absl::Status s = ApplyTransportEnvironment(env, &options);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("LOCKSTEP_RUNTIME_CONNECT='yes'"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace lockstep
