#include "core/deadline.h"

#include <time.h>

#include <algorithm>
#include <cstdint>

namespace lockstep {

Deadline DeadlineIn(std::chrono::milliseconds timeout) { return DeadlineAfter(SteadyClock::now(), timeout); }

Deadline DeadlineAfter(Deadline now, std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) return now;
  // Compare in milliseconds: converting `timeout` to the clock's nanoseconds
  // is itself what would overflow.
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::max() - now);
  if (timeout >= room) return kNoDeadline;
  return now + timeout;
}

Deadline CoarseNow() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  // libstdc++'s steady_clock is CLOCK_MONOTONIC: the same base.
  return Deadline(std::chrono::duration_cast<SteadyClock::duration>(std::chrono::seconds(ts.tv_sec) +
                                                                    std::chrono::nanoseconds(ts.tv_nsec)));
}

std::chrono::nanoseconds CoarseResolution() {
  timespec ts;
  if (clock_getres(CLOCK_MONOTONIC_COARSE, &ts) != 0) return std::chrono::milliseconds(10);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

std::chrono::milliseconds SaturatingAdd(std::chrono::milliseconds a, std::chrono::milliseconds b) {
  using Ms = std::chrono::milliseconds;
  if (b.count() > 0 && a > Ms::max() - b) return Ms::max();
  if (b.count() < 0 && a < Ms::min() - b) return Ms::min();
  return a + b;
}

int PollTimeoutMs(Deadline deadline) {
  const Deadline now = SteadyClock::now();
  // Checked first: `deadline - now` overflows for a deadline far in the past.
  if (deadline <= now) return 0;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
  return static_cast<int>(std::min<int64_t>(left.count() + 1, 3600 * 1000));
}

}  // namespace lockstep
