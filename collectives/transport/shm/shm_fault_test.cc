// Failures on shared memory become errors on every rank, never hangs: a rank
// SIGKILLed in the middle of a 64 MiB all-reduce is named by every other
// rank, an error on one rank reaches the others with its reason, a missing
// peer times out naming it, and nothing of ours is left in /dev/shm.
#include <dirent.h>

#include <csignal>
#include <future>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "collectives/bootstrap/shm_communicator.h"
#include "collectives/communicator.h"
#include "collectives/store/hash_store.h"
#include "collectives/testing/fault_cases.h"
#include "collectives/testing/group.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using testing::RunShmProcesses;
using testing::RunShmThreads;
using testing::ShmTestOptions;

bool Contains(const absl::Status& s, absl::string_view needle) {
  return s.message().find(needle) != absl::string_view::npos;
}

std::set<std::string> DevShm() {
  std::set<std::string> names;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) names.insert(e->d_name);
    ::closedir(d);
  }
  return names;
}

TEST(ShmFaultTest, KilledRankFailsEveryOtherRankNamingIt) {
  const std::set<std::string> shm_before = DevShm();
  ShmCommunicatorOptions options = ShmTestOptions();
  options.communicator.timeout = Milliseconds(20000);
  constexpr int kVictim = 2;
  const std::vector<absl::Status> results = RunShmProcesses(
      4,
      [](Communicator& comm) {
        return testing::KilledRankCase(comm, kVictim, "rank 2 (shm, pid ");  // Names its process.
      },
      options, /*deadline_seconds=*/60);
  ASSERT_EQ(results.size(), 4u);
  for (int r : {0, 1, 3}) EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
  EXPECT_TRUE(Contains(results[kVictim], "signal 9")) << results[kVictim];
  // Every rank is gone: nothing of ours is anywhere, /dev/shm included.
  EXPECT_EQ(DevShm(), shm_before);
}

TEST(ShmFaultTest, AnErrorOnOneRankReachesTheOthersWithItsReason) {
  ShmCommunicatorOptions options = ShmTestOptions();
  options.communicator.timeout = Milliseconds(20000);
  const std::vector<absl::Status> results = RunShmProcesses(
      3,
      [](Communicator& comm) -> absl::Status {
        // Rank 1 reduces one element more: its messages' sizes differ from what
        // its neighbours expect, so the first to notice aborts the others.
        const int64_t count = (1 << 20) + (comm.rank() == 1 ? 1 : 0);
        Tensor t = *Tensor::Zeros({count}, DType::kF32);
        absl::Status s = comm.AllReduce(t, ReduceOp::kSum)->Wait();
        if (s.ok()) return absl::InternalError("mismatched all-reduces succeeded");
        if (s.code() == absl::StatusCode::kDeadlineExceeded || !Contains(s, "collective mismatch")) {
          return absl::InternalError(absl::StrCat("the reason did not arrive: ", s.ToString()));
        }
        return absl::OkStatus();
      },
      options, /*deadline_seconds=*/60);
  for (size_t r = 0; r < results.size(); ++r) EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
}

TEST(ShmFaultTest, AMissingPeerTimesOutNamingIt) {
  ShmCommunicatorOptions options = ShmTestOptions();
  options.communicator.timeout = Milliseconds(500);
  std::promise<void> rank0_done;
  std::shared_future<void> done = rank0_done.get_future().share();
  const std::vector<absl::Status> results = RunShmThreads(
      2, [&](Communicator& comm) { return testing::MissingPeerCase(comm, rank0_done, done, "rank 1 (shm, pid "); },
      options);
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

TEST(ShmFaultTest, BadOptionsAreRefusedNamingTheFieldBeforeAnythingIsPublished) {
  auto store = std::make_shared<HashStore>();
  ShmCommunicatorOptions options = ShmTestOptions();
  options.transport.slot_bytes = 100;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateShmCommunicator(store, 0, 2, options);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(comm.status(), "ShmTransportOptions.slot_bytes is 100")) << comm.status();
  options = ShmTestOptions();
  options.store_prefix = "";
  comm = CreateShmCommunicator(store, 0, 2, options);
  EXPECT_TRUE(Contains(comm.status(), "ShmCommunicatorOptions.store_prefix is empty")) << comm.status();
  comm = CreateShmCommunicator(store, 2, 2, ShmTestOptions());
  EXPECT_TRUE(Contains(comm.status(), "rank 2 is not in [0, 2)")) << comm.status();
  EXPECT_EQ(*store->NumKeys(), 0);
}

}  // namespace
}  // namespace lockstep
