// NcclWatchdog without NCCL: deadlines and asynchronous errors fail the
// operations in flight with their fingerprint and abort exactly once.
#include "collectives/nccl/nccl_watchdog.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

using std::chrono::milliseconds;

// Waits (bounded) until the watchdog has failed: each of its rounds is
// observed, so the loop ends as soon as the failing round has finished.
bool WaitForFailure(NcclWatchdog& dog) {
  const Deadline give_up = DeadlineIn(std::chrono::seconds(20));
  while (!dog.failed() && dog.AwaitRound(SteadyClock::now(), give_up)) {
  }
  return dog.failed();
}

struct Recorder {
  std::mutex mu;
  std::atomic<int> aborts{0};
  absl::Status async_error;
  absl::Status aborted_with;
  NcclWatchdog::Hooks Hooks() {
    NcclWatchdog::Hooks hooks;
    hooks.async_error = [this] {
      std::lock_guard<std::mutex> lock(mu);
      return async_error;
    };
    hooks.abort = [this](const absl::Status& s) {
      std::lock_guard<std::mutex> lock(mu);
      aborted_with = s;
      aborts.fetch_add(1);
    };
    return hooks;
  }
};

TEST(NcclWatchdogTest, OperationPastItsDeadlineAbortsOnceAndNamesIt) {
  Recorder rec;
  NcclWatchdog dog(rec.Hooks(), milliseconds(2), "rank 3 on cuda:1");
  dog.Begin("AllReduce seq 7 (f32, 1000 elements, sum)", DeadlineIn(milliseconds(10)));
  ASSERT_TRUE(WaitForFailure(dog));
  const absl::Status s = dog.status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("AllReduce seq 7 (f32, 1000 elements, sum)"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("rank 3 on cuda:1"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("aborted the NCCL communicator"), absl::string_view::npos) << s;
  // Later checks and a second failure do not abort again.
  dog.Fail(absl::InternalError("second"));
  // Two whole rounds after the second failure.
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(dog.AwaitRound(SteadyClock::now(), DeadlineIn(std::chrono::seconds(20))));
  EXPECT_EQ(rec.aborts.load(), 1);
  EXPECT_EQ(dog.status(), s);
  std::lock_guard<std::mutex> lock(rec.mu);
  EXPECT_EQ(rec.aborted_with, s);
}

TEST(NcclWatchdogTest, AsyncErrorFailsWithTheOperationsInFlight) {
  Recorder rec;
  NcclWatchdog dog(rec.Hooks(), milliseconds(2), "rank 0 on cuda:0");
  dog.Begin("Broadcast seq 2 (bf16, 5 elements, root 1)", kNoDeadline);
  {
    std::lock_guard<std::mutex> lock(rec.mu);
    rec.async_error = absl::UnavailableError("remote process exited");
  }
  ASSERT_TRUE(WaitForFailure(dog));
  const absl::Status s = dog.status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("Broadcast seq 2"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("remote process exited"), absl::string_view::npos) << s;
  EXPECT_EQ(rec.aborts.load(), 1);
}

TEST(NcclWatchdogTest, FinishedOperationsAndNoDeadlineNeverFail) {
  Recorder rec;
  NcclWatchdog dog(rec.Hooks(), milliseconds(1), "rank 0 on cuda:0");
  const Deadline deadline = DeadlineIn(milliseconds(50));
  const uint64_t done = dog.Begin("AllGather seq 1", deadline);
  dog.End(done);
  dog.Begin("AllGather seq 2", kNoDeadline);
  // Rounds that began past the ended op's deadline, and 20 more.
  const Deadline give_up = DeadlineIn(std::chrono::seconds(20));
  ASSERT_TRUE(dog.AwaitRound(deadline, give_up));
  const uint64_t after = dog.rounds();
  while (dog.rounds() < after + 20) ASSERT_TRUE(dog.AwaitRound(SteadyClock::now(), give_up));
  EXPECT_TRUE(dog.status().ok()) << dog.status();
  EXPECT_EQ(rec.aborts.load(), 0);
}

TEST(NcclWatchdogTest, FailFromTheOwnerAbortsAndSticks) {
  Recorder rec;
  NcclWatchdog dog(rec.Hooks(), milliseconds(50), "rank 0 on cuda:0");
  dog.Fail(absl::AbortedError("peer rank 1 failed first"));
  EXPECT_TRUE(dog.failed());
  EXPECT_EQ(dog.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(rec.aborts.load(), 1);
}

}  // namespace
}  // namespace lockstep
