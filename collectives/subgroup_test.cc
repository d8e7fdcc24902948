// Subgroups: Communicator::Split (MPI_Comm_split) and NewGroup
// (dist.new_group) over TCP, shared memory and the automatic choice (which
// picks a subgroup's transport for its own members), on threads and on
// processes: membership and renumbering, interleaved collectives on a
// subgroup and its parent, nested splits, lists that differ between ranks,
// errors that stay in their group, and no descriptor, thread or mapping
// left behind by many subgroups made and destroyed.

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectives/bootstrap/communicator_factory.h"
#include "collectives/communicator.h"
#include "collectives/host_backend.h"
#include "collectives/store/hash_store.h"
#include "collectives/testing/fake_transport.h"
#include "collectives/testing/group.h"
#include "collectives/testing/process_resources.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using testing::ExpectAllOk;

absl::Status Expect(bool ok, const std::string& what) { return ok ? absl::OkStatus() : absl::InternalError(what); }

// A one-element i64 all-reduce (SUM) of `value`.
absl::StatusOr<int64_t> SumOf(Communicator& comm, int64_t value) {
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::FromVector<int64_t>({value}));
  LOCKSTEP_RETURN_IF_ERROR(comm.AllReduce(t, ReduceOp::kSum)->Wait());
  return t.data<int64_t>()[0];
}

// Checks a member's communicator: its size and rank, and that an all-reduce
// over it sums exactly `members`' parent ranks.
absl::Status CheckGroup(Communicator* sub, const std::vector<int>& members, int parent_rank, const std::string& what) {
  if (sub == nullptr) return absl::InternalError(absl::StrCat(what, ": a member got no communicator"));
  int expected_rank = -1;
  int64_t sum = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == parent_rank) expected_rank = static_cast<int>(i);
    sum += members[i];
  }
  LOCKSTEP_RETURN_IF_ERROR(Expect(sub->size() == static_cast<int>(members.size()),
                                  absl::StrCat(what, ": size ", sub->size(), ", expected ", members.size())));
  LOCKSTEP_RETURN_IF_ERROR(
      Expect(sub->rank() == expected_rank, absl::StrCat(what, ": rank ", sub->rank(), ", expected ", expected_rank)));
  LOCKSTEP_ASSIGN_OR_RETURN(int64_t got, SumOf(*sub, parent_rank));
  return Expect(got == sum, absl::StrCat(what, ": the sum over the subgroup is ", got, ", expected ", sum));
}

TEST(SplitTest, ColorsMakeGroupsOrderedByKeyThenRank) {
  ExpectAllOk(testing::RunThreads(6, [](Communicator& comm) -> absl::Status {
    const int r = comm.rank();
    // Colors 0 (ranks 0, 3), 1 (1, 4), none (2, 5: MPI_UNDEFINED); keys
    // reverse the order within a color, except ties (key 0) by rank.
    const int color = r % 3 == 2 ? Communicator::kNoColor : r % 3;
    const int key = r % 3 == 1 ? 0 : -r;
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, comm.Split(color, key));
    if (color == Communicator::kNoColor) return Expect(sub == nullptr, "a rank without a color got a group");
    const std::vector<int> members = color == 0 ? std::vector<int>{3, 0} : std::vector<int>{1, 4};
    return CheckGroup(sub.get(), members, r, absl::StrCat("color ", color));
  }));
}

TEST(NewGroupTest, MembersAreRenumberedInAscendingOrderAndOthersGetNone) {
  ExpectAllOk(testing::RunThreads(4, [](Communicator& comm) -> absl::Status {
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, comm.NewGroup({3, 1}));
    if (comm.rank() == 0 || comm.rank() == 2) return Expect(sub == nullptr, "a non-member got a group");
    return CheckGroup(sub.get(), {1, 3}, comm.rank(), "{1, 3}");
  }));
}

TEST(NewGroupTest, ListsThatDifferBetweenRanksAreAnErrorOnEveryRank) {
  const auto results = testing::RunThreads(3, [](Communicator& comm) -> absl::Status {
    const std::vector<int> mine = comm.rank() == 2 ? std::vector<int>{0, 2} : std::vector<int>{0, 1};
    absl::StatusOr<std::unique_ptr<Communicator>> sub = comm.NewGroup(mine);
    if (sub.ok()) return absl::InternalError("different lists made a group");
    LOCKSTEP_RETURN_IF_ERROR(
        Expect(absl::StrContains(sub.status().message(), "another rank list"), sub.status().ToString()));
    return comm.Barrier()->Wait();  // The parent is unharmed.
  });
  ExpectAllOk(results);
}

TEST(NewGroupTest, BadListsAreRefusedBeforeAnyExchange) {
  ExpectAllOk(testing::RunThreads(2, [](Communicator& comm) -> absl::Status {
    for (const std::vector<int>& bad : {std::vector<int>{}, std::vector<int>{0, 0}, std::vector<int>{2}}) {
      if (comm.NewGroup(bad).ok()) return absl::InternalError("a bad list was accepted");
    }
    if (comm.Split(-2, 0).ok()) return absl::InternalError("color -2 was accepted");
    return comm.Barrier()->Wait();
  }));
}

// The case: a subgroup of 2 of 4 ranks and the whole group run
// collectives interleaved, each with its own sequence, both correct.
TEST(SplitTest, ASubgroupAndItsParentInterleaveCollectives) {
  for (int transport = 0; transport < 2; ++transport) {
    const testing::RankFn body = [](Communicator& comm) -> absl::Status {
      const int r = comm.rank();
      LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, comm.NewGroup({1, 2}));
      for (int round = 0; round < 20; ++round) {
        // Issued back to back, waited for together.
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor all, Tensor::FromVector<int64_t>({r + round}));
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor gathered, Tensor::Zeros({4}, DType::kI64));
        std::shared_ptr<Work> w1 = comm.AllReduce(all, ReduceOp::kSum);
        Tensor part;
        std::shared_ptr<Work> w2;
        if (sub != nullptr) {
          LOCKSTEP_ASSIGN_OR_RETURN(part, Tensor::FromVector<int64_t>({10 * r + round}));
          w2 = sub->AllReduce(part, ReduceOp::kMax);
        }
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine, Tensor::FromVector<int64_t>({100 * r}));
        std::shared_ptr<Work> w3 = comm.AllGather(mine, gathered);
        LOCKSTEP_RETURN_IF_ERROR(w1->Wait());
        LOCKSTEP_RETURN_IF_ERROR(w3->Wait());
        LOCKSTEP_RETURN_IF_ERROR(Expect(all.data<int64_t>()[0] == 6 + 4 * round, "the parent's all-reduce"));
        for (int k = 0; k < 4; ++k) {
          LOCKSTEP_RETURN_IF_ERROR(Expect(gathered.data<int64_t>()[k] == 100 * k, "the parent's all-gather"));
        }
        if (sub != nullptr) {
          LOCKSTEP_RETURN_IF_ERROR(w2->Wait());
          LOCKSTEP_RETURN_IF_ERROR(Expect(part.data<int64_t>()[0] == 20 + round, "the subgroup's all-reduce"));
        }
      }
      return absl::OkStatus();
    };
    ExpectAllOk(transport == 0 ? testing::RunThreads(4, body) : testing::RunShmThreads(4, body));
  }
}

TEST(SplitTest, SplitsNestAndRepeat) {
  ExpectAllOk(testing::RunShmThreads(4, [](Communicator& comm) -> absl::Status {
    const int r = comm.rank();
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> half, comm.Split(r / 2, r));
    LOCKSTEP_RETURN_IF_ERROR(
        CheckGroup(half.get(), r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}, r, "half"));
    // A split of the split: each rank alone.
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> alone, half->Split(half->rank(), 0));
    LOCKSTEP_RETURN_IF_ERROR(CheckGroup(alone.get(), {half->rank()}, half->rank(), "alone"));
    // The same split again: a new group (new keys), equally right.
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> again, comm.Split(r / 2, r));
    return CheckGroup(again.get(), r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}, r, "again");
  }));
}

// Four ranks on two hosts (host identities given): the parent is
// hierarchical; a split per host is shared memory, a split across the hosts
// TCP, each chosen for the subgroup's own members.
TEST(SplitTest, ASubgroupChoosesTheTransportForItsOwnMembers) {
  auto store = std::make_shared<HashStore>();
  store->set_timeout(Milliseconds(60000));
  std::vector<absl::Status> results(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      results[r] = [&]() -> absl::Status {
        CommunicatorFactoryOptions options;
        options.tcp.host = "127.0.0.1";
        options.tcp.timeout = Milliseconds(60000);
        options.communicator.timeout = Milliseconds(60000);
        options.host_id = r < 2 ? "host-a" : "host-b";
        LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, CreateCommunicator(store, r, 4, options));
        LOCKSTEP_RETURN_IF_ERROR(Expect(absl::StartsWith(comm->capabilities().name, "hierarchical"),
                                        "the parent is " + comm->capabilities().name));
        LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> host, comm->Split(r / 2, r));
        LOCKSTEP_RETURN_IF_ERROR(
            Expect(host->capabilities().name == "host over shm", "a host's subgroup is " + host->capabilities().name));
        LOCKSTEP_RETURN_IF_ERROR(
            CheckGroup(host.get(), r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}, r, "host"));
        LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> across, comm->Split(r % 2, r));
        LOCKSTEP_RETURN_IF_ERROR(Expect(across->capabilities().name == "host over tcp",
                                        "a subgroup across hosts is " + across->capabilities().name));
        return CheckGroup(across.get(), r % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3}, r, "across");
      }();
    });
  }
  for (std::thread& t : threads) t.join();
  ExpectAllOk(results);
}

TEST(SplitTest, AnErrorInASubgroupLeavesItsParentWorking) {
  ExpectAllOk(testing::RunThreads(3, [](Communicator& comm) -> absl::Status {
    const int r = comm.rank();
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, comm.NewGroup({0, 1}));
    if (sub != nullptr) {
      // Mismatched sizes inside the subgroup break it (both members fail)...
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros({r == 0 ? 4 : 8}, DType::kF32));
      const absl::Status s = sub->AllReduce(t, ReduceOp::kSum)->Wait();
      LOCKSTEP_RETURN_IF_ERROR(Expect(!s.ok(), "a mismatched all-reduce succeeded"));
      LOCKSTEP_RETURN_IF_ERROR(Expect(!sub->broken_status().ok(), "the subgroup is not broken"));
    }
    // ...and the parent goes on.
    LOCKSTEP_ASSIGN_OR_RETURN(int64_t sum, SumOf(comm, r));
    return Expect(sum == 3, "the parent's all-reduce after the subgroup failed");
  }));
}

TEST(SplitTest, ACommunicatorWithoutAFactoryRefusesClearly) {
  std::vector<std::unique_ptr<Transport>> transports = testing::FakeNetwork::Create(2, {});
  std::vector<absl::Status> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<HostBackend>> backend = HostBackend::Create(std::move(transports[r]), {});
      absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(*std::move(backend), {});
      absl::StatusOr<std::unique_ptr<Communicator>> sub = (*comm)->Split(0, 0);
      results[r] = sub.status().code() == absl::StatusCode::kFailedPrecondition &&
                           absl::StrContains(sub.status().message(), "no subgroup factory")
                       ? absl::OkStatus()
                       : absl::InternalError(sub.status().ToString());
    });
  }
  for (std::thread& t : threads) t.join();
  ExpectAllOk(results);
}

TEST(SplitProcessTest, SplitsOnRealProcesses) {
  for (int n : {2, 3, 4}) {
    ExpectAllOk(testing::RunShmProcesses(n, [n](Communicator& comm) -> absl::Status {
      const int r = comm.rank();
      LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, comm.Split(r % 2, -r));
      std::vector<int> members;
      for (int k = n - 1; k >= 0; --k) {
        if (k % 2 == r % 2) members.push_back(k);
      }
      return CheckGroup(sub.get(), members, r, "parity");
    }));
  }
}

TEST(SplitLeakTest, ManySubgroupsLeaveNoDescriptorThreadOrMappingBehind) {
  for (int transport = 0; transport < 2; ++transport) {
    // The group's own resources exist from the start; only the subgroups'
    // are counted.
    size_t fds_before = 0, threads_before = 0;
    int mappings_before = 0;
    const testing::RankFn body = [&](Communicator& comm) -> absl::Status {
      // Everyone's communicator exists before the count, with the
      // connections that splitting needs (TCP makes them on first use).
      LOCKSTEP_RETURN_IF_ERROR(comm.Barrier()->Wait());
      {
        LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, comm.Split(comm.rank() % 2, 0));
        LOCKSTEP_RETURN_IF_ERROR(SumOf(*sub, 1).status());
      }
      LOCKSTEP_RETURN_IF_ERROR(comm.Barrier()->Wait());
      if (comm.rank() == 0) {
        fds_before = testing::Entries("/proc/self/fd").size();
        threads_before = testing::Entries("/proc/self/task").size();
        mappings_before = testing::CountMappingsOf("lockstep-shm");
      }
      LOCKSTEP_RETURN_IF_ERROR(comm.Barrier()->Wait());
      for (int i = 0; i < 30; ++i) {
        LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, comm.Split(comm.rank() % 2, 0));
        LOCKSTEP_ASSIGN_OR_RETURN(int64_t sum, SumOf(*sub, 1));
        LOCKSTEP_RETURN_IF_ERROR(Expect(sum == sub->size(), "a subgroup's all-reduce"));
      }
      // Every subgroup is gone on every rank before the count.
      LOCKSTEP_RETURN_IF_ERROR(comm.Barrier()->Wait());
      if (comm.rank() == 0) {
        LOCKSTEP_RETURN_IF_ERROR(Expect(testing::Entries("/proc/self/fd").size() == fds_before,
                                        absl::StrCat("descriptors: ", fds_before, " before, ",
                                                     testing::Entries("/proc/self/fd").size(), " after")));
        LOCKSTEP_RETURN_IF_ERROR(Expect(testing::Entries("/proc/self/task").size() == threads_before,
                                        absl::StrCat("threads: ", threads_before, " before, ",
                                                     testing::Entries("/proc/self/task").size(), " after")));
        LOCKSTEP_RETURN_IF_ERROR(Expect(testing::CountMappingsOf("lockstep-shm") == mappings_before,
                                        absl::StrCat("mappings: ", mappings_before, " before, ",
                                                     testing::CountMappingsOf("lockstep-shm"), " after")));
      }
      return comm.Barrier()->Wait();
    };
    ExpectAllOk(transport == 0 ? testing::RunThreads(4, body) : testing::RunShmThreads(4, body));
  }
}

}  // namespace
}  // namespace lockstep
