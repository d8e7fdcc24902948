// MonitoredBarrier: a barrier that names the ranks that did not come, as
// torch.distributed.monitored_barrier (gloo): every other rank reports to
// rank 0, which waits for them up to `timeout` and then answers each.
//
//   absl::Status s = MonitoredBarrier(comm, std::chrono::seconds(30));
//
// When rank 2 is stuck, s on rank 0 is "[Rank 0]: Rank 2 failed to pass
// monitoredBarrier in 30000 ms ..."; ranks 1 and 3 learn the same from rank
// 0's answer; rank 2, if it ever gets there, learns that rank 0 gave up on
// it.
//
// With `wait_all_ranks`, rank 0 waits the full timeout for every rank and
// names all that did not come ("Ranks 2, 3 failed ..."); without, it stops
// at the first. The other ranks wait for rank 0's answer up to 2 x timeout
// + 10 s (rank 0 may spend the whole timeout deciding), then say that rank 0
// is the one behind. After a failed barrier the
// group should be torn down, as in PyTorch: the late ranks' messages are
// still received, but the ranks disagree about what happened.
//
// Uses point-to-point messages with tag kMonitoredBarrierTag; do not use
// that tag for your own Send/Recv. Every rank must call it (it is not
// ordered with the collectives).
#ifndef LOCKSTEP_COLLECTIVES_MONITORED_BARRIER_H_
#define LOCKSTEP_COLLECTIVES_MONITORED_BARRIER_H_

#include <chrono>
#include <cstdint>

#include "absl/status/status.h"
#include "collectives/communicator.h"

namespace lockstep {

// The largest tag Send/Recv accept.
inline constexpr uint32_t kMonitoredBarrierTag = (uint32_t{1} << 31) - 257;

// OK once every rank arrived; DeadlineExceeded naming the missing ranks
// otherwise (on rank 0 and on every rank that arrived).
absl::Status MonitoredBarrier(Communicator& comm, std::chrono::milliseconds timeout, bool wait_all_ranks = false);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_MONITORED_BARRIER_H_
