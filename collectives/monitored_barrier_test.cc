// MonitoredBarrier names the ranks that did not come, on rank 0 and on every
// rank that came, with PyTorch's wording; a late rank learns that rank 0
// gave up on it, so every operation ends and nothing waits for the
// communicator's timeout. The late ranks call it only after rank 0 has
// returned (ordering, not time: they wait for rank 0's result). Ranks are
// threads over TCP.
#include "collectives/monitored_barrier.h"

#include <future>
#include <set>
#include <string>
#include <vector>

#include "collectives/testing/group.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using std::chrono::milliseconds;

TEST(MonitoredBarrierTest, EveryRankPassesWhenAllCome) {
  for (int ranks : {1, 2, 4}) {
    for (bool wait_all : {false, true}) {
      const auto results = testing::RunThreads(ranks, [&](Communicator& comm) {
        for (int round = 0; round < 3; ++round) {
          if (absl::Status s = MonitoredBarrier(comm, milliseconds(30000), wait_all); !s.ok()) return s;
        }
        return absl::OkStatus();
      });
      for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << ranks << " ranks: " << s;
    }
  }
}

// Ranks in `late` call the barrier only once rank 0's has returned.
std::vector<absl::Status> WithLateRanks(int ranks, const std::set<int>& late, bool wait_all) {
  std::promise<void> rank0_done;
  std::shared_future<void> rank0_returned = rank0_done.get_future().share();
  return testing::RunThreads(ranks, [&](Communicator& comm) {
    if (late.count(comm.rank()) > 0) rank0_returned.wait();
    absl::Status s = MonitoredBarrier(comm, milliseconds(300), wait_all);
    if (comm.rank() == 0) rank0_done.set_value();
    return s;
  });
}

void ExpectContains(const absl::Status& s, const std::string& text) {
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find(text), absl::string_view::npos) << "'" << text << "' not in: " << s;
}

TEST(MonitoredBarrierTest, RankZeroAndTheRanksThatCameNameTheOneThatDidNot) {
  const auto results = WithLateRanks(3, {2}, /*wait_all=*/false);
  ExpectContains(results[0], "[Rank 0]: Rank 2 failed to pass monitoredBarrier in 300 ms");
  ExpectContains(results[1],
                 "[Rank 1]: Rank 1 successfully reached monitoredBarrier, but received errors while waiting for "
                 "send/recv from rank 0: rank 0 reports: Rank 2 failed to pass monitoredBarrier in 300 ms");
  ExpectContains(results[2], "[Rank 2]: MonitoredBarrier: this rank came after rank 0 stopped waiting for it");
}

TEST(MonitoredBarrierTest, WaitAllRanksNamesEveryRankThatDidNotCome) {
  const auto results = WithLateRanks(4, {1, 3}, /*wait_all=*/true);
  ExpectContains(results[0], "[Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 300 ms");
  ExpectContains(results[2], "rank 0 reports: Ranks 1, 3 failed");
  ExpectContains(results[1], "this rank came after rank 0 stopped waiting for it");
  ExpectContains(results[3], "this rank came after rank 0 stopped waiting for it");
}

TEST(MonitoredBarrierTest, WithoutWaitAllRankZeroStopsAtTheFirst) {
  const auto results = WithLateRanks(4, {1, 3}, /*wait_all=*/false);
  ExpectContains(results[0], "[Rank 0]: Rank 1 failed to pass monitoredBarrier in 300 ms (rank 0 stopped waiting");
  ExpectContains(results[2], "rank 0 reports: Rank 1 failed");
}

TEST(MonitoredBarrierTest, ABadTimeoutIsRefused) {
  const auto results =
      testing::RunThreads(2, [](Communicator& comm) { return MonitoredBarrier(comm, milliseconds(0)); });
  for (const absl::Status& s : results) EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

}  // namespace
}  // namespace lockstep
