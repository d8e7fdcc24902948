// Deadlines on the steady clock, as every blocking call in lockstep takes
// them: a point in time, never a duration, so that a call made of several
// waits cannot exceed what its caller allowed.
//
//   const Deadline deadline = DeadlineIn(std::chrono::seconds(30));
//   while (!done) {
//     if (SteadyClock::now() >= deadline) return absl::DeadlineExceededError("...");
//     poll(&p, 1, PollTimeoutMs(deadline));
//   }
#ifndef LOCKSTEP_CORE_DEADLINE_H_
#define LOCKSTEP_CORE_DEADLINE_H_

#include <chrono>

namespace lockstep {

using SteadyClock = std::chrono::steady_clock;
using Deadline = SteadyClock::time_point;

// "No deadline": DeadlineIn saturates to it, and every helper that takes a
// deadline treats it as forever (poll() wakes at least hourly and waits
// again).
inline constexpr Deadline kNoDeadline = Deadline::max();

// now + timeout, saturating: a timeout past the clock's range (2^62 ms,
// milliseconds::max()) is kNoDeadline instead of signed overflow; a zero or
// negative timeout is now (already due).
Deadline DeadlineIn(std::chrono::milliseconds timeout);
// The same from a clock reading the caller already took.
Deadline DeadlineAfter(Deadline now, std::chrono::milliseconds timeout);

// The steady clock as of the kernel's last tick (CLOCK_MONOTONIC_COARSE: the
// same clock, read for ~3 ns instead of ~27 ns). Never ahead of
// SteadyClock::now(); normally up to CoarseResolution() behind, more when the
// tick itself runs late (a loaded VM, a tickless idle CPU), so a deadline timed
// on it may fire that much late. For timestamps taken once per operation on a
// hot path.
Deadline CoarseNow();
// The tick CoarseNow() advances by (4 ms at HZ=250): how far it lags
// SteadyClock::now() when ticks are on time.
std::chrono::nanoseconds CoarseResolution();

// a + b without overflow (clamped to the range of milliseconds), for timeouts
// built from parts (a wait plus a grace period).
std::chrono::milliseconds SaturatingAdd(std::chrono::milliseconds a, std::chrono::milliseconds b);

// Milliseconds left until `deadline` for poll(): 0 when past, capped at 1 h
// (so kNoDeadline polls in 1 h steps).
int PollTimeoutMs(Deadline deadline);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DEADLINE_H_
