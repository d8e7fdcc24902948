// Runs one function on every rank of a group, as threads of this process or
// as forked processes, each with its own Communicator over real TCP on
// loopback. For tests only.
//
//   RunThreads(4, [](Communicator& comm) -> absl::Status { ... });
//   RunProcesses(4, [](Communicator& comm) -> absl::Status { ... });
//
// Both return one status per rank. Processes are this test binary run again
// (fork+exec) for the current gtest test; each gets a hard deadline (alarm)
// so a hung rank dies instead of hanging the test. Call RunProcesses only
// from a gtest test body, the same way on every run (no randomness before it).
#ifndef LOCKSTEP_COLLECTIVES_TESTING_GROUP_H_
#define LOCKSTEP_COLLECTIVES_TESTING_GROUP_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "collectives/bootstrap/shm_communicator.h"
#include "collectives/bootstrap/tcp_communicator.h"
#include "collectives/communicator.h"
#include "collectives/store/store.h"
#include "collectives/testing/fake_transport.h"

namespace lockstep {
namespace testing {

using RankFn = std::function<absl::Status(Communicator& comm)>;

TcpCommunicatorOptions TestOptions();

std::vector<absl::Status> RunThreads(int size, const RankFn& fn, TcpCommunicatorOptions options = TestOptions());

// `deadline_seconds` bounds each child process (SIGALRM).
std::vector<absl::Status> RunProcesses(int size, const RankFn& fn, TcpCommunicatorOptions options = TestOptions(),
                                       int deadline_seconds = 120);

// Shared memory (collectives/bootstrap/shm_communicator.h) instead of TCP: the same
// runners, every rank on this host.
ShmCommunicatorOptions ShmTestOptions();
std::vector<absl::Status> RunShmThreads(int size, const RankFn& fn, ShmCommunicatorOptions options = ShmTestOptions());
std::vector<absl::Status> RunShmProcesses(int size, const RankFn& fn, ShmCommunicatorOptions options = ShmTestOptions(),
                                          int deadline_seconds = 120);

// What RunProcesses and RunShmProcesses share: each child builds its rank's
// communicator with `make` over the group's store (whose waits take
// `timeout`).
using CommunicatorFactory =
    std::function<absl::StatusOr<std::unique_ptr<Communicator>>(std::shared_ptr<Store> store, int rank, int size)>;
std::vector<absl::Status> RunProcessesWith(int size, const RankFn& fn, const CommunicatorFactory& make,
                                           Milliseconds timeout, int deadline_seconds = 120);
// The same with threads as ranks over one in-memory store.
std::vector<absl::Status> RunThreadsWith(int size, const RankFn& fn, const CommunicatorFactory& make,
                                         Milliseconds timeout);

// Threads over an in-memory FakeNetwork (collectives/testing/fake_transport.h)
// through the host backend: the communicator exactly as in production, with
// the network's capacity under the test's control.
std::vector<absl::Status> RunFakeThreads(int size, const RankFn& fn, FakeNetworkOptions network = {},
                                         TcpCommunicatorOptions options = TestOptions());

// A gtest failure for each rank whose result is not OK, naming the rank.
void ExpectAllOk(const std::vector<absl::Status>& results);

}  // namespace testing
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_TESTING_GROUP_H_
