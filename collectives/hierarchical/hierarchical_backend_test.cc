// The hierarchical backend against the flat host backend: fake hosts (2 x 2,
// interleaved, 3 + 2, 1 + 2, one host, one rank per host, one rank), each
// rank a thread, TCP on loopback among the hosts and, inside them, TCP or
// the shared-memory transport (each layout runs with both). Every
// collective on integer-valued data gives the same bytes on every rank as a
// flat TCP group; AllReduce moves no bytes from a non-leader to another
// host; a rank that leaves fails every other rank instead of hanging.
#include "collectives/hierarchical/hierarchical_backend.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/communicator.h"
#include "collectives/host_backend.h"
#include "collectives/store/hash_store.h"
#include "collectives/store/prefix_store.h"
#include "collectives/testing/fake_transport.h"
#include "collectives/testing/group.h"
#include "collectives/transport/shm/shm_transport.h"
#include "collectives/transport/tcp/tcp_transport.h"
#include "core/dtype.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using RankFn = std::function<absl::Status(Communicator& comm)>;

CommunicatorOptions TestCommunicatorOptions() {
  CommunicatorOptions o;
  o.timeout = Milliseconds(60000);
  return o;
}

TcpTransportOptions TestTcpOptions() {
  TcpTransportOptions o;
  o.timeout = Milliseconds(60000);
  return o;
}

ShmTransportOptions TestShmOptions() {
  ShmTransportOptions o;
  o.timeout = Milliseconds(60000);
  return o;
}

// One rank of a hierarchical group with `local` ("tcp" or "shm") inside
// hosts and TCP among them, as collectives/bootstrap/communicator_factory.cc builds it.
absl::StatusOr<std::unique_ptr<Communicator>> MakeRank(std::shared_ptr<Store> store, const HostLayout& layout, int rank,
                                                       const std::string& local_kind, CommunicatorOptions options) {
  const int host = layout.host_of[rank];
  const int local_size = static_cast<int>(layout.hosts[host].size());
  HierarchicalBackend::Levels levels;
  levels.local_name = local_kind;
  if (local_size > 1) {
    PrefixStore local(absl::StrCat("local", host), store);
    if (local_kind == "shm") {
      LOCKSTEP_ASSIGN_OR_RETURN(levels.local,
                                ShmTransport::Create(local, layout.local_index[rank], local_size, TestShmOptions()));
    } else {
      LOCKSTEP_ASSIGN_OR_RETURN(levels.local,
                                TcpTransport::Create(local, layout.local_index[rank], local_size, TestTcpOptions()));
    }
  }
  if (layout.is_leader(rank) && layout.num_hosts() > 1) {
    PrefixStore leaders("leaders", store);
    LOCKSTEP_ASSIGN_OR_RETURN(levels.leaders,
                              TcpTransport::Create(leaders, host, layout.num_hosts(), TestTcpOptions()));
  }
  PrefixStore flat_store("flat", store);
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TcpTransport> flat,
                            TcpTransport::Create(flat_store, rank, layout.world_size(), TestTcpOptions()));
  LOCKSTEP_ASSIGN_OR_RETURN(levels.flat, HostBackend::Create(std::move(flat), {}, "tcp"));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<HierarchicalBackend> backend,
                            HierarchicalBackend::Create(layout, rank, std::move(levels), {}));
  return Communicator::Create(std::move(backend), options, std::make_shared<PrefixStore>("comm", store));
}

// Runs `fn` on every rank of the group whose ranks live on `hosts`.
std::vector<absl::Status> RunHierarchical(const std::vector<std::string>& hosts, const RankFn& fn,
                                          const std::string& local_kind = "tcp",
                                          CommunicatorOptions options = TestCommunicatorOptions()) {
  const int n = static_cast<int>(hosts.size());
  absl::StatusOr<HostLayout> layout = HostLayout::FromIdentities(hosts);
  if (!layout.ok()) return std::vector<absl::Status>(n, layout.status());
  auto store = std::make_shared<HashStore>();
  store->set_timeout(Milliseconds(60000));
  std::vector<absl::Status> results(n);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<std::unique_ptr<Communicator>> comm = MakeRank(store, *layout, rank, local_kind, options);
      results[rank] = comm.ok() ? fn(**comm) : comm.status();
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

// Element i of rank r's data: a small positive integer, so that sums,
// products (<= 7^5) and averages are exact whatever the order.
double Value(int rank, int64_t i) { return static_cast<double>((i * 3 + rank) % 7 + 1); }

absl::StatusOr<Tensor> Filled(DType dtype, int64_t count, int rank, int64_t offset = 0) {
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros({count}, dtype));
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_arithmetic_v<T>) {
      for (int64_t i = 0; i < count; ++i) t.data<T>()[i] = static_cast<T>(Value(rank, offset + i));
    }
  });
  return t;
}

void Append(std::string* out, const Tensor& t) { out->append(static_cast<const char*>(t.raw_data()), t.nbytes()); }

// Every collective on known data; the bytes of every result this rank is
// given, in order, go to `out`.
absl::Status Script(Communicator& comm, std::string* out) {
  const int n = comm.size(), r = comm.rank();
  for (DType dtype : {DType::kF32, DType::kI32, DType::kF64}) {
    for (ReduceOp op : kAllReduceOps) {
      if (IsBitwise(op) && !IsIntegral(dtype)) continue;  // Refused (communicator_test checks it).
      for (int64_t count : {0, 1, 7, 1000, 70001}) {      // 70001 f32: the ring among leaders.
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Filled(dtype, count, r));
        LOCKSTEP_RETURN_IF_ERROR(comm.AllReduce(t, op)->Wait());
        Append(out, t);
      }
      for (int root = 0; root < n; ++root) {
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor in, Filled(dtype, 1000, r));
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor result, Tensor::Zeros({1000}, dtype));
        LOCKSTEP_RETURN_IF_ERROR(comm.Reduce(in, result, op, root)->Wait());
        if (r == root) Append(out, result);
        Append(out, in);  // Unchanged.
      }
    }
    for (int root = 0; root < n; ++root) {
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Filled(dtype, 1001, r, root));
      LOCKSTEP_RETURN_IF_ERROR(comm.Broadcast(t, root)->Wait());
      Append(out, t);
    }
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine, Filled(dtype, 13, r));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor all, Tensor::Zeros({13 * n}, dtype));
    LOCKSTEP_RETURN_IF_ERROR(comm.AllGather(mine, all)->Wait());
    Append(out, all);
    LOCKSTEP_RETURN_IF_ERROR(comm.Gather(mine, all, n - 1)->Wait());
    if (r == n - 1) Append(out, all);
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor wide, Filled(dtype, 13 * n, r));
    LOCKSTEP_RETURN_IF_ERROR(comm.ReduceScatter(wide, mine, ReduceOp::kSum)->Wait());
    Append(out, mine);
    LOCKSTEP_RETURN_IF_ERROR(comm.Scatter(wide, mine, 0)->Wait());
    Append(out, mine);
  }
  LOCKSTEP_RETURN_IF_ERROR(comm.Barrier()->Wait());
  if (n > 1) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor send, Filled(DType::kI64, 100, r));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor recv, Tensor::Zeros({100}, DType::kI64));
    auto s = comm.Send(send, (r + 1) % n, 5);
    auto v = comm.Recv(recv, (r + n - 1) % n, 5);
    LOCKSTEP_RETURN_IF_ERROR(s->Wait());
    LOCKSTEP_RETURN_IF_ERROR(v->Wait());
    Append(out, recv);
  }
  return comm.Barrier()->Wait();
}

void ExpectSameAsFlatTcp(const std::vector<std::string>& hosts, const std::string& local_kind) {
  const std::string expected_name = absl::StrCat("hierarchical(", local_kind, "+tcp)");
  const int n = static_cast<int>(hosts.size());
  std::vector<std::string> ours(n), flat(n);
  std::vector<std::string> names(n);
  std::vector<absl::Status> results = RunHierarchical(
      hosts,
      [&](Communicator& comm) {
        names[comm.rank()] = comm.capabilities().name;
        return Script(comm, &ours[comm.rank()]);
      },
      local_kind);
  for (int r = 0; r < n; ++r) ASSERT_TRUE(results[r].ok()) << "hierarchical rank " << r << ": " << results[r];
  results = testing::RunThreads(n, [&](Communicator& comm) { return Script(comm, &flat[comm.rank()]); });
  for (int r = 0; r < n; ++r) ASSERT_TRUE(results[r].ok()) << "flat rank " << r << ": " << results[r];
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(names[r], expected_name);
    ASSERT_EQ(ours[r].size(), flat[r].size()) << "rank " << r;
    EXPECT_TRUE(ours[r] == flat[r]) << "rank " << r << " of hosts " << absl::StrJoin(hosts, ",")
                                    << ": results differ from the flat TCP group's";
  }
}

// Each layout with TCP and with shared memory inside the hosts.
class LayoutTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LayoutTest, TwoHostsTimesTwoRanksMatchFlatTcp) { ExpectSameAsFlatTcp({"a", "a", "b", "b"}, GetParam()); }

TEST_P(LayoutTest, InterleavedHostsMatchFlatTcp) { ExpectSameAsFlatTcp({"a", "b", "a", "b"}, GetParam()); }

TEST_P(LayoutTest, UnevenHostsMatchFlatTcp) {
  ExpectSameAsFlatTcp({"a", "a", "b", "b", "a"}, GetParam());
  ExpectSameAsFlatTcp({"a", "b", "b"}, GetParam());
}

TEST_P(LayoutTest, DegenerateLayoutsMatchFlatTcp) {
  ExpectSameAsFlatTcp({"a", "a", "a"}, GetParam());  // No leaders' level.
  ExpectSameAsFlatTcp({"a", "b", "c"}, GetParam());  // No local level.
  ExpectSameAsFlatTcp({"a"}, GetParam());
}

TEST(HierarchicalBackendTest, AllReduceGivesExactValues) {
  // Independent of the flat group: SUM and AVG of known integers.
  const std::vector<std::string> hosts = {"a", "a", "b", "b"};
  std::vector<absl::Status> results = RunHierarchical(
      hosts,
      [](Communicator& comm) -> absl::Status {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
          LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Filled(DType::kF32, 70001, comm.rank()));
          LOCKSTEP_RETURN_IF_ERROR(comm.AllReduce(t, op)->Wait());
          for (int64_t i = 0; i < t.numel(); ++i) {
            float sum = 0;
            for (int q = 0; q < 4; ++q) sum += static_cast<float>(Value(q, i));
            const float want = op == ReduceOp::kAvg ? sum / 4.0f : sum;
            if (t.data<float>()[i] != want) {
              return absl::InternalError(absl::StrCat("element ", i, ": ", t.data<float>()[i], ", expected ", want));
            }
          }
        }
        return absl::OkStatus();
      },
      "shm");
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
}

TEST(HierarchicalBackendTest, NonLeadersSendOnlyInsideTheirHost) {
  std::vector<TrafficCounters> traffic(4);
  std::vector<absl::Status> results = RunHierarchical({"a", "a", "b", "b"}, [&](Communicator& comm) -> absl::Status {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Filled(DType::kF32, 1 << 16, comm.rank()));
    LOCKSTEP_RETURN_IF_ERROR(comm.AllReduce(t, ReduceOp::kSum)->Wait());
    traffic[comm.rank()] = comm.Traffic();
    return comm.Barrier()->Wait();  // Barrier traffic is empty messages.
  });
  for (int r = 0; r < 4; ++r) ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
  const uint64_t bytes = 4 << 16;
  // Rank 1 and 3 send their data to their leader and receive the result.
  EXPECT_EQ(traffic[1].bytes_sent, (std::vector<uint64_t>{bytes, 0, 0, 0}));
  EXPECT_EQ(traffic[3].bytes_sent, (std::vector<uint64_t>{0, 0, bytes, 0}));
  EXPECT_EQ(traffic[1].bytes_received, (std::vector<uint64_t>{bytes, 0, 0, 0}));
  // Leaders exchange one host's worth each way (recursive doubling or ring).
  EXPECT_EQ(traffic[0].bytes_sent[2], bytes);
  EXPECT_EQ(traffic[2].bytes_received[0], bytes);
}

TEST_P(LayoutTest, ARankThatLeavesFailsEveryOtherRank) {
  CommunicatorOptions options = TestCommunicatorOptions();
  options.failure_report_window = Milliseconds(200);
  std::vector<absl::Status> results = RunHierarchical(
      {"a", "a", "b", "b"},
      [](Communicator& comm) -> absl::Status {
        // Rank 3 (not a leader) leaves: its connections close.
        if (comm.rank() == 3) return absl::OkStatus();
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Filled(DType::kF32, 1000, comm.rank()));
        return comm.AllReduce(t, ReduceOp::kSum)->Wait();
      },
      GetParam(), options);
  EXPECT_TRUE(results[3].ok()) << results[3];
  for (int r = 0; r < 3; ++r) {
    EXPECT_FALSE(results[r].ok()) << "rank " << r << " should have failed";
    EXPECT_NE(results[r].code(), absl::StatusCode::kDeadlineExceeded) << "rank " << r << ": " << results[r];
  }
  // The leader of rank 3's host names the level and the rank.
  EXPECT_NE(results[2].message().find("inside host 1"), absl::string_view::npos) << results[2];
}

TEST(HierarchicalBackendTest, CreateChecksTheLevelsAgainstTheLayout) {
  absl::StatusOr<HostLayout> layout = HostLayout::FromIdentities({"a", "a", "b", "b"});
  ASSERT_TRUE(layout.ok());
  auto flat = [](int size, int rank) {
    std::vector<std::unique_ptr<Transport>> t = testing::FakeNetwork::Create(size);
    return std::unique_ptr<Backend>(std::move(*HostBackend::Create(std::move(t[rank]), {})));
  };
  {
    HierarchicalBackend::Levels levels;  // Rank 1 without its local transport.
    levels.flat = flat(4, 1);
    absl::StatusOr<std::unique_ptr<HierarchicalBackend>> b =
        HierarchicalBackend::Create(*layout, 1, std::move(levels), {});
    ASSERT_FALSE(b.ok());
    EXPECT_NE(b.status().message().find("needs a local transport of 2 ranks"), absl::string_view::npos) << b.status();
  }
  {
    HierarchicalBackend::Levels levels;  // A flat backend of the wrong size.
    levels.flat = flat(3, 1);
    absl::StatusOr<std::unique_ptr<HierarchicalBackend>> b =
        HierarchicalBackend::Create(*layout, 1, std::move(levels), {});
    ASSERT_FALSE(b.ok());
    EXPECT_NE(b.status().message().find("all 4 ranks"), absl::string_view::npos) << b.status();
  }
  {
    HierarchicalBackend::Levels levels;  // A leader without the leaders' level.
    levels.flat = flat(4, 2);
    levels.local = std::move(testing::FakeNetwork::Create(2)[0]);
    absl::StatusOr<std::unique_ptr<HierarchicalBackend>> b =
        HierarchicalBackend::Create(*layout, 2, std::move(levels), {});
    ASSERT_FALSE(b.ok());
    EXPECT_NE(b.status().message().find("leads host 1"), absl::string_view::npos) << b.status();
  }
}

INSTANTIATE_TEST_SUITE_P(LocalTransports, LayoutTest, ::testing::Values("tcp", "shm"));

TEST(HostLayoutTest, GroupsRanksByIdentityInRankOrder) {
  absl::StatusOr<HostLayout> layout = HostLayout::FromIdentities({"x", "y", "x", "z", "y"});
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->hosts, (std::vector<std::vector<int>>{{0, 2}, {1, 4}, {3}}));
  EXPECT_EQ(layout->host_of, (std::vector<int>{0, 1, 0, 2, 1}));
  EXPECT_EQ(layout->local_index, (std::vector<int>{0, 0, 1, 0, 1}));
  EXPECT_EQ(layout->leader(1), 1);
  EXPECT_EQ(layout->Describe(), "{0,2} {1,4} {3}");
  EXPECT_FALSE(layout->single_host());
  EXPECT_FALSE(layout->one_rank_per_host());
  EXPECT_FALSE(HostLayout::FromIdentities({"x", ""}).ok());
  EXPECT_FALSE(HostLayout::FromIdentities({}).ok());
}

}  // namespace
}  // namespace lockstep
