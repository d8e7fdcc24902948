#include "core/deadline.h"

#include <chrono>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

using std::chrono::milliseconds;

TEST(DeadlineTest, SaturatesInsteadOfOverflowing) {
  EXPECT_EQ(DeadlineIn(milliseconds::max()), kNoDeadline);
  EXPECT_EQ(DeadlineIn(milliseconds(int64_t{1} << 62)), kNoDeadline);
  const Deadline before = SteadyClock::now();
  const Deadline due = DeadlineIn(milliseconds(-5));  // already due: now
  const Deadline after = SteadyClock::now();
  EXPECT_GE(due, before);
  EXPECT_LE(due, after);
  const Deadline soon = DeadlineIn(milliseconds(1000));
  EXPECT_GE(soon, before + milliseconds(1000));
  EXPECT_NE(soon, kNoDeadline);
}

// The kernel promises only that the coarse clock is the steady clock as of
// its last tick: never ahead, monotonic, and advancing. How far behind depends
// on when the tick ran (a late tick on a loaded VM lags by more than the
// resolution), so the lag is not asserted.
TEST(DeadlineTest, CoarseNowIsNeverAheadOfTheSteadyClockAndAdvances) {
  EXPECT_GT(CoarseResolution().count(), 0);
  const Deadline first = CoarseNow();
  Deadline previous = first;
  const Deadline give_up = SteadyClock::now() + std::chrono::seconds(30);
  bool advanced = false;
  for (int i = 0; i < 1000 || !advanced; ++i) {
    const Deadline coarse = CoarseNow();
    const Deadline after = SteadyClock::now();
    ASSERT_LE(coarse, after);
    ASSERT_GE(coarse, previous);
    previous = coarse;
    advanced = coarse > first;
    ASSERT_LT(after, give_up) << "CLOCK_MONOTONIC_COARSE did not advance in 30 s";
  }
}

TEST(DeadlineTest, SaturatingAddClamps) {
  EXPECT_EQ(SaturatingAdd(milliseconds(2), milliseconds(3)), milliseconds(5));
  EXPECT_EQ(SaturatingAdd(milliseconds::max(), milliseconds(1)), milliseconds::max());
  EXPECT_EQ(SaturatingAdd(milliseconds::min(), milliseconds(-1)), milliseconds::min());
}

TEST(DeadlineTest, PollTimeoutIsZeroWhenPastAndCappedAtAnHour) {
  EXPECT_EQ(PollTimeoutMs(SteadyClock::now() - milliseconds(10)), 0);
  EXPECT_EQ(PollTimeoutMs(Deadline::min()), 0);  // far past: no overflow
  EXPECT_EQ(PollTimeoutMs(kNoDeadline), 3600 * 1000);
  const int left = PollTimeoutMs(DeadlineIn(milliseconds(5000)));
  EXPECT_GT(left, 0);
  EXPECT_LE(left, 5001);
}

}  // namespace
}  // namespace lockstep
