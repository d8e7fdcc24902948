// ElasticGroup over real TCP communicators (threads, loopback, one store):
//   * a member that goes away fails the survivors' all-reduce, naming it;
//     the survivors shrink to epoch 1 without it, their new communicator
//     sums over the two of them, and they report which member was lost;
//   * a newcomer registers, the members admit it at epoch 2, and the three
//     sum together again;
//   * a survivor that arrives after the others closed the epoch is not a
//     member of it, and says so;
//   * bad arguments are named.
#include "collectives/elastic/elastic_group.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/store/hash_store.h"
#include "core/status.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

ElasticGroupOptions Options() {
  ElasticGroupOptions o;
  o.settle = Milliseconds(300);
  o.timeout = Milliseconds(30000);
  o.communicator.communicator.timeout = Milliseconds(30000);
  o.communicator.communicator.failure_report_window = Milliseconds(100);
  o.communicator.transport.host = "127.0.0.1";
  return o;
}

// Sum over the group of (member id + 1).
absl::StatusOr<float> SumOfIds(ElasticGroup& group) {
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::FromVector<float>({static_cast<float>(group.member() + 1)}));
  LOCKSTEP_RETURN_IF_ERROR(group.comm().AllReduce(t, ReduceOp::kSum)->Wait());
  return t.data<float>()[0];
}

// Runs fn(member) on a thread per member; returns their statuses.
std::vector<absl::Status> RunMembers(const std::vector<int>& members, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> out(members.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < members.size(); ++i) threads.emplace_back([&, i] { out[i] = fn(members[i]); });
  for (std::thread& t : threads) t.join();
  return out;
}

TEST(ElasticGroupTest, SurvivorsShrinkWithoutTheLostMemberAndAdmitANewcomer) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::vector<int>> lost(3);
  std::vector<float> after_shrink(3, 0), after_grow(4, 0);
  std::vector<int64_t> epochs(4, -1);
  const std::vector<absl::Status> results = RunMembers({0, 1, 2, 3}, [&](int member) -> absl::Status {
    if (member == 3) {
      // The newcomer: admitted at the members' next AdmitNewcomers.
      LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<ElasticGroup> group, ElasticGroup::Join(store, 3, Options()));
      EXPECT_EQ(group->members(), (std::vector<int>{0, 1, 3}));
      EXPECT_EQ(group->rank(), 2);
      LOCKSTEP_ASSIGN_OR_RETURN(after_grow[3], SumOfIds(*group));
      epochs[3] = group->epoch();
      // A member now: it takes part in the next admission too.
      LOCKSTEP_ASSIGN_OR_RETURN(const int none, group->AdmitNewcomers());
      EXPECT_EQ(none, 0);
      return absl::OkStatus();
    }
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<ElasticGroup> group, ElasticGroup::Create(store, member, 3, Options()));
    LOCKSTEP_ASSIGN_OR_RETURN(const float all, SumOfIds(*group));
    EXPECT_EQ(all, 1 + 2 + 3);
    if (member == 2) {
      // Leaves once the others have their sum: its connections close with it.
      return store->Wait({"test/summed/0", "test/summed/1"}, Milliseconds(30000));
    }
    LOCKSTEP_RETURN_IF_ERROR(store->Set("test/summed/" + std::to_string(member), "1"));
    // The next collective fails on both survivors, naming the lost rank.
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::FromVector<float>({1}));
    const absl::Status failed = group->comm().AllReduce(t, ReduceOp::kSum)->Wait();
    EXPECT_FALSE(failed.ok());
    EXPECT_NE(failed.message().find("rank 2"), std::string::npos) << failed;
    LOCKSTEP_ASSIGN_OR_RETURN(lost[member], group->Shrink());
    EXPECT_EQ(group->epoch(), 1);
    EXPECT_EQ(group->members(), (std::vector<int>{0, 1}));
    LOCKSTEP_ASSIGN_OR_RETURN(after_shrink[member], SumOfIds(*group));
    // Grow once the newcomer has registered (its key is in the store).
    LOCKSTEP_RETURN_IF_ERROR(store->Wait({"elastic/join/1"}, Milliseconds(30000)));
    LOCKSTEP_ASSIGN_OR_RETURN(const int admitted, group->AdmitNewcomers());
    EXPECT_EQ(admitted, 1);
    EXPECT_EQ(group->members(), (std::vector<int>{0, 1, 3}));
    LOCKSTEP_ASSIGN_OR_RETURN(after_grow[member], SumOfIds(*group));
    epochs[member] = group->epoch();
    // Nobody waiting: nothing changes.
    LOCKSTEP_ASSIGN_OR_RETURN(const int none, group->AdmitNewcomers());
    EXPECT_EQ(none, 0);
    EXPECT_EQ(group->epoch(), 2);
    return absl::OkStatus();
  });
  for (size_t i = 0; i < results.size(); ++i) EXPECT_TRUE(results[i].ok()) << "member " << i << ": " << results[i];
  for (int m : {0, 1}) {
    EXPECT_EQ(lost[m], std::vector<int>{2}) << m;
    EXPECT_EQ(after_shrink[m], 1 + 2) << m;
  }
  for (int m : {0, 1, 3}) {
    EXPECT_EQ(after_grow[m], 1 + 2 + 4) << m;
    EXPECT_EQ(epochs[m], 2) << m;
  }
}

TEST(ElasticGroupTest, ASurvivorArrivingAfterTheCloseIsNotAMember) {
  auto store = std::make_shared<HashStore>();
  std::vector<float> sums(3, 0);
  const std::vector<absl::Status> results = RunMembers({0, 1, 2}, [&](int member) -> absl::Status {
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<ElasticGroup> group, ElasticGroup::Create(store, member, 3, Options()));
    if (member == 2) {
      // Late: only once the others have decided epoch 1.
      LOCKSTEP_RETURN_IF_ERROR(store->Wait({"elastic/1/decision"}, Milliseconds(30000)));
      absl::StatusOr<std::vector<int>> late = group->Shrink();
      EXPECT_TRUE(absl::IsFailedPrecondition(late.status())) << late.status();
      EXPECT_NE(late.status().message().find("arrived after the survivors closed epoch 1"), std::string::npos)
          << late.status();
      return absl::OkStatus();
    }
    LOCKSTEP_ASSIGN_OR_RETURN(std::vector<int> lost, group->Shrink());
    EXPECT_EQ(lost, std::vector<int>{2});
    LOCKSTEP_ASSIGN_OR_RETURN(sums[member], SumOfIds(*group));
    return absl::OkStatus();
  });
  for (size_t i = 0; i < results.size(); ++i) EXPECT_TRUE(results[i].ok()) << "member " << i << ": " << results[i];
  EXPECT_EQ(sums[0], 3);
  EXPECT_EQ(sums[1], 3);
}

TEST(ElasticGroupTest, AMemberMarkedGoneIsNotWaitedFor) {
  // Settling would take an hour: the survivors close the epoch at once only
  // because the launcher's mark says the missing member will not come (or
  // fail after `timeout`, 20 s).
  auto store = std::make_shared<HashStore>();
  ElasticGroupOptions o = Options();
  o.settle = Milliseconds(3600 * 1000);
  o.timeout = Milliseconds(20000);
  std::vector<std::vector<int>> lost(3);
  const std::vector<absl::Status> results = RunMembers({0, 1, 2}, [&](int member) -> absl::Status {
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<ElasticGroup> group, ElasticGroup::Create(store, member, 3, o));
    if (member == 2) return ElasticGroup::MarkGone(*store, "elastic", 2);  // "exits"
    LOCKSTEP_RETURN_IF_ERROR(store->Wait({ElasticGroup::GoneKey("elastic", 2)}, Milliseconds(20000)));
    LOCKSTEP_ASSIGN_OR_RETURN(lost[member], group->Shrink());
    LOCKSTEP_ASSIGN_OR_RETURN(const float sum, SumOfIds(*group));
    EXPECT_EQ(sum, 1 + 2);
    return absl::OkStatus();
  });
  for (size_t i = 0; i < results.size(); ++i) EXPECT_TRUE(results[i].ok()) << "member " << i << ": " << results[i];
  EXPECT_EQ(lost[0], std::vector<int>{2});
  EXPECT_EQ(lost[1], std::vector<int>{2});
  // What an observer (the launcher) reads: the epoch's size once formed.
  absl::StatusOr<std::string> formed = store->Get("elastic/1/formed", Milliseconds(1000));
  ASSERT_TRUE(formed.ok()) << formed.status();
  EXPECT_EQ(*formed, "2");
}

TEST(ElasticGroupTest, BadArgumentsAreNamed) {
  auto store = std::make_shared<HashStore>();
  EXPECT_TRUE(absl::IsInvalidArgument(ElasticGroup::Create(store, 3, 3, Options()).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ElasticGroup::Create(store, -1, 3, Options()).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ElasticGroup::Join(store, -1, Options()).status()));
  ElasticGroupOptions quick = Options();
  quick.timeout = Milliseconds(50);
  const absl::Status never = ElasticGroup::Join(store, 9, quick).status();
  EXPECT_TRUE(absl::IsDeadlineExceeded(never)) << never;
  EXPECT_NE(never.message().find("was not admitted"), std::string::npos) << never;
}

}  // namespace
}  // namespace lockstep
