// Fault cases every transport must pass, as rank bodies for the runners of
// collectives/testing/group.h (testonly). Each returns OK when the rank saw
// what it should; `peer` is how the transport names the failed rank in
// errors ("rank 2 (127.0.0.1:" over TCP, "rank 2 (shm, pid " over shared
// memory).
//
//   auto results = RunProcesses(3, [](Communicator& comm) {
//     return KilledRankCase(comm, /*victim=*/2, "rank 2 (127.0.0.1:");
//   }, options, /*deadline_seconds=*/60);
#ifndef LOCKSTEP_COLLECTIVES_TESTING_FAULT_CASES_H_
#define LOCKSTEP_COLLECTIVES_TESTING_FAULT_CASES_H_

#include <functional>
#include <future>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "collectives/communicator.h"

namespace lockstep {
namespace testing {

// Every rank runs a 64 MiB all-reduce (after one to warm up); `victim`
// SIGKILLs itself once it is under way. The others must fail before the
// deadline with an error naming `peer`, and their next operation must fail
// with the same cause. (The victim's own result is the runner's "signal 9".)
// `op` (optional) starts the operation instead of the all-reduce, on
// buffers of its own large enough to be mid-transfer when the victim dies.
using LargeOpFn = std::function<std::shared_ptr<Work>(Communicator& comm)>;
absl::Status KilledRankCase(Communicator& comm, int victim, absl::string_view peer, const LargeOpFn& op = nullptr);

// Rank 1 stays alive and connected but never joins rank 0's all-reduce:
// rank 0 must fail at its deadline naming `peer`, then release rank 1
// through `rank0_done`. Two ranks, as threads.
absl::Status MissingPeerCase(Communicator& comm, std::promise<void>& rank0_done, std::shared_future<void> done,
                             absl::string_view peer);

}  // namespace testing
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_TESTING_FAULT_CASES_H_
