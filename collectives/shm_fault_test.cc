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
#include "collectives/communicator.h"
#include "collectives/hash_store.h"
#include "collectives/shm_communicator.h"
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
  const std::vector<absl::Status> results = RunShmProcesses(4, [](Communicator& comm) -> absl::Status {
    // 64 MiB per rank: long enough to be mid-transfer when the victim dies.
    Tensor t = *Tensor::Zeros({16 << 20}, DType::kF32);
    if (auto s = comm.AllReduce(t, ReduceOp::kSum)->Wait(); !s.ok()) return s;  // Warm up.
    std::shared_ptr<Work> work = comm.AllReduce(t, ReduceOp::kSum);
    if (comm.rank() == kVictim) {
      // Wait until the operation has started moving data, then die.
      while (!work->IsCompleted() && comm.broken_status().ok()) {
        std::raise(SIGKILL);
      }
    }
    absl::Status s = work->Wait();
    if (s.ok()) return absl::InternalError("the all-reduce succeeded although rank 2 was killed");
    if (s.code() == absl::StatusCode::kDeadlineExceeded) {
      return absl::InternalError(absl::StrCat("the death was noticed only at the deadline: ", s.ToString()));
    }
    // The message names the dead rank and its process.
    if (!Contains(s, "rank 2 (shm, pid ")) {
      return absl::InternalError(absl::StrCat("error does not name rank 2 and its pid: ", s.ToString()));
    }
    absl::Status later = comm.Barrier()->Wait();
    if (later.ok() || !Contains(later, "rank 2")) {
      return absl::InternalError(absl::StrCat("a later op did not fail with the cause: ", later.ToString()));
    }
    return absl::OkStatus();
  }, options, /*deadline_seconds=*/60);
  ASSERT_EQ(results.size(), 4u);
  for (int r : {0, 1, 3}) EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
  EXPECT_TRUE(Contains(results[kVictim], "signal 9")) << results[kVictim];
  // Every rank is gone: nothing of ours is anywhere, /dev/shm included.
  EXPECT_EQ(DevShm(), shm_before);
}

TEST(ShmFaultTest, AnErrorOnOneRankReachesTheOthersWithItsReason) {
  ShmCommunicatorOptions options = ShmTestOptions();
  options.communicator.timeout = Milliseconds(20000);
  const std::vector<absl::Status> results = RunShmProcesses(3, [](Communicator& comm) -> absl::Status {
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
  }, options, /*deadline_seconds=*/60);
  for (size_t r = 0; r < results.size(); ++r) EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
}

TEST(ShmFaultTest, AMissingPeerTimesOutNamingIt) {
  ShmCommunicatorOptions options = ShmTestOptions();
  options.communicator.timeout = Milliseconds(500);
  std::promise<void> rank0_done;
  std::shared_future<void> done = rank0_done.get_future().share();
  const std::vector<absl::Status> results = RunShmThreads(2, [&](Communicator& comm) -> absl::Status {
    if (comm.rank() == 1) {
      done.wait();  // Alive, connected, but never joins the all-reduce.
      return absl::OkStatus();
    }
    Tensor t = *Tensor::Zeros({10}, DType::kF32);
    absl::Status s = comm.AllReduce(t, ReduceOp::kSum)->Wait();
    rank0_done.set_value();
    if (s.code() != absl::StatusCode::kDeadlineExceeded || !Contains(s, "rank 1 (shm, pid ")) {
      return absl::InternalError(s.ToString());
    }
    return absl::OkStatus();
  }, options);
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
