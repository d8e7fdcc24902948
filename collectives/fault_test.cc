// Failures must become errors on every rank, never hangs: a rank killed in the
// middle of an all-reduce, mismatched collectives (caught by the debug
// fingerprints, or by the message headers), and deadlines.
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <future>
#include <iterator>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "collectives/communicator.h"
#include "collectives/host_backend.h"
#include "collectives/store/store.h"
#include "collectives/testing/fake_transport.h"
#include "collectives/testing/fault_cases.h"
#include "collectives/testing/group.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using testing::RunProcesses;
using testing::RunThreads;
using testing::TestOptions;

bool Contains(const absl::Status& s, absl::string_view needle) {
  return s.message().find(needle) != absl::string_view::npos;
}

TEST(FaultTest, KilledRankFailsEveryOtherRankNamingIt) {
  TcpCommunicatorOptions options = TestOptions();
  options.communicator.timeout = Milliseconds(20000);
  constexpr int kVictim = 2;
  const std::vector<absl::Status> results = RunProcesses(
      3,
      [](Communicator& comm) {
        return testing::KilledRankCase(comm, kVictim, "rank 2 (127.0.0.1:");  // Names its address.
      },
      options, /*deadline_seconds=*/60);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
  EXPECT_TRUE(Contains(results[kVictim], "signal 9")) << results[kVictim];
}

// The same for the new collectives: a rank killed during an all-to-all or
// an uneven all-gather fails the others at once, naming it.
TEST(FaultTest, KilledRankFailsAnAllToAllAndAnAllGatherVNamingIt) {
  TcpCommunicatorOptions options = TestOptions();
  options.communicator.timeout = Milliseconds(20000);
  constexpr int kVictim = 1;
  for (int op = 0; op < 2; ++op) {
    const std::vector<absl::Status> results = RunProcesses(
        3,
        [op](Communicator& comm) {
          // 48 MiB in and out per rank.
          auto in = std::make_shared<Tensor>(*Tensor::Zeros({12 << 20}, DType::kF32));
          auto out = std::make_shared<Tensor>(*Tensor::Zeros({12 << 20}, DType::kF32));
          auto mine = std::make_shared<Tensor>(*Tensor::Zeros({(4 << 20) + comm.rank()}, DType::kF32));
          auto all = std::make_shared<Tensor>(*Tensor::Zeros({(12 << 20) + 3}, DType::kF32));
          const testing::LargeOpFn start = [op, in, out, mine, all](Communicator& c) {
            if (op == 0) return c.AllToAll(*in, *out);
            return c.AllGatherV(*mine, *all, {4 << 20, (4 << 20) + 1, (4 << 20) + 2});
          };
          return testing::KilledRankCase(comm, kVictim, "rank 1 (127.0.0.1:", start);
        },
        options, /*deadline_seconds=*/60);
    ASSERT_EQ(results.size(), 3u);
    EXPECT_TRUE(results[0].ok()) << (op == 0 ? "AllToAll: " : "AllGatherV: ") << results[0];
    EXPECT_TRUE(results[2].ok()) << (op == 0 ? "AllToAll: " : "AllGatherV: ") << results[2];
    EXPECT_TRUE(Contains(results[kVictim], "signal 9")) << results[kVictim];
  }
}

// Fingerprints (LOCKSTEP_DEBUG=DETAIL) name the uneven layouts that differ.
TEST(FaultTest, DebugModeCatchesUnevenLayoutsThatDiffer) {
  TcpCommunicatorOptions options = TestOptions();
  options.communicator.debug_checks = true;
  const std::vector<absl::Status> results = RunThreads(
      2,
      [](Communicator& comm) -> absl::Status {
        // Rank 1 believes in other blocks of the same total.
        const std::vector<int64_t> counts = comm.rank() == 0 ? std::vector<int64_t>{3, 5} : std::vector<int64_t>{4, 4};
        Tensor in = *Tensor::Zeros({counts[comm.rank()]}, DType::kF32);
        Tensor out = *Tensor::Zeros({8}, DType::kF32);
        absl::Status s = comm.AllGatherV(in, out, counts)->Wait();
        if (s.ok()) return absl::InternalError("mismatch not detected");
        for (const char* needle : {"collective mismatch", "rank 0 called AllGatherV #0 (f32, count 8, layout ",
                                   "rank 1 called AllGatherV #0 (f32, count 8, layout "}) {
          if (!Contains(s, needle))
            return absl::InternalError(absl::StrCat("missing '", needle, "' in ", s.ToString()));
        }
        return absl::OkStatus();
      },
      options);
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

// The flight recorder: rank 2 skips an all-reduce and goes on to a barrier.
// Every rank's error names rank 2 and the operation it skipped, at once:
// the timeout (two minutes) is far beyond the ranks' own deadline (60 s).
TEST(FlightRecorderFaultTest, ARankThatSkipsAnOperationIsNamedByEveryRank) {
  TcpCommunicatorOptions options = TestOptions();
  options.communicator.timeout = Milliseconds(120000);
  const std::vector<absl::Status> results = RunProcesses(
      3,
      [](Communicator& comm) -> absl::Status {
        for (int i = 0; i < 4; ++i) {
          if (absl::Status s = comm.Barrier()->Wait(); !s.ok()) return s;  // #0-#3, in step.
        }
        Tensor t = *Tensor::Zeros({1000}, DType::kF32);
        const absl::Status s = comm.rank() == 2 ? comm.Barrier()->Wait() : comm.AllReduce(t, ReduceOp::kSum)->Wait();
        if (s.ok()) return absl::InternalError("the skipped all-reduce went unnoticed");
        for (const char* needle : {"Flight recorder: ",
                                   "Out of step: rank 2 ran Barrier #4 () where ranks 0, 1 ran "
                                   "AllReduce #4 (f32, count 1000, SUM)"}) {
          if (!Contains(s, needle))
            return absl::InternalError(absl::StrCat("missing '", needle, "' in ", s.ToString()));
        }
        return absl::OkStatus();
      },
      options, /*deadline_seconds=*/60);
  for (size_t r = 0; r < results.size(); ++r) EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
}

// Rank 2 never comes to the all-reduce (it waits for the others to give
// up): at the timeout, both waiting ranks name it and the operation it has
// not reached.
TEST(FlightRecorderFaultTest, ARankThatNeverComesIsNamedAtTheTimeout) {
  TcpCommunicatorOptions options = TestOptions();
  options.communicator.timeout = Milliseconds(1500);
  std::promise<void> first_done, second_done;
  std::shared_future<void> a = first_done.get_future().share(), b = second_done.get_future().share();
  const std::vector<absl::Status> results = RunThreads(
      3,
      [&](Communicator& comm) -> absl::Status {
        if (absl::Status s = comm.Barrier()->Wait(); !s.ok()) return s;
        if (comm.rank() == 2) {
          a.wait();
          b.wait();
          return absl::OkStatus();
        }
        Tensor t = *Tensor::Zeros({10}, DType::kF32);
        const absl::Status s = comm.AllReduce(t, ReduceOp::kSum)->Wait();
        (comm.rank() == 0 ? first_done : second_done).set_value();
        for (const char* needle :
             {"rank 2 sent no report", "rank 2 has not reached AllReduce #1 (f32, count 10, SUM)"}) {
          if (!Contains(s, needle))
            return absl::InternalError(absl::StrCat("missing '", needle, "' in ", s.ToString()));
        }
        return absl::OkStatus();
      },
      options);
  for (size_t r = 0; r < results.size(); ++r) EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
}

TEST(FlightRecorderFaultTest, DumpOnFailureWritesEveryRanksRecorder) {
  TcpCommunicatorOptions options = TestOptions();
  options.communicator.dump_on_failure = std::getenv("TEST_TMPDIR");
  const std::vector<absl::Status> results = RunThreads(
      2,
      [](Communicator& comm) -> absl::Status {
        Tensor t = *Tensor::Zeros({comm.rank() == 0 ? 8 : 9}, DType::kF32);  // A size mismatch.
        (void)comm.AllReduce(t, ReduceOp::kSum)->Wait();
        return absl::OkStatus();
      },
      options);
  for (int r = 0; r < 2; ++r) {
    std::ifstream in(absl::StrCat(std::getenv("TEST_TMPDIR"), "/flight_recorder_rank", r, ".json"));
    std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(json.find("\"description\":\"AllReduce #0 (f32, count "), std::string::npos) << r << ": " << json;
    EXPECT_NE(json.find("\"state\":\"failed\""), std::string::npos) << r << ": " << json;
  }
}

TEST(FaultTest, DebugModeCatchesMismatchedOpsOnEveryRank) {
  TcpCommunicatorOptions options = TestOptions();
  options.communicator.debug_checks = true;
  const std::vector<absl::Status> results = RunThreads(
      2,
      [](Communicator& comm) -> absl::Status {
        Tensor t = *Tensor::Zeros({1000}, DType::kF32);
        absl::Status s = comm.rank() == 0 ? comm.AllReduce(t, ReduceOp::kSum)->Wait() : comm.Broadcast(t, 0)->Wait();
        if (s.ok()) return absl::InternalError("mismatch not detected");
        for (const char* needle : {"collective mismatch", "rank 0 called AllReduce #0 (f32, count 1000, SUM)",
                                   "rank 1 called Broadcast #0 (f32, count 1000, root 0)"}) {
          if (!Contains(s, needle))
            return absl::InternalError(absl::StrCat("missing '", needle, "' in ", s.ToString()));
        }
        return absl::OkStatus();
      },
      options);
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

TEST(FaultTest, DebugModeCatchesCountAndDtypeMismatches) {
  TcpCommunicatorOptions options = TestOptions();
  options.communicator.debug_checks = true;
  for (int variant = 0; variant < 2; ++variant) {
    const std::vector<absl::Status> results = RunThreads(
        3,
        [&](Communicator& comm) -> absl::Status {
          const bool odd_one = comm.rank() == 2;
          Tensor t = variant == 0 ? *Tensor::Zeros({odd_one ? 999 : 1000}, DType::kF32)
                                  : *Tensor::Zeros({1000}, odd_one ? DType::kF64 : DType::kF32);
          absl::Status s = comm.AllReduce(t, ReduceOp::kSum)->Wait();
          const char* needle = variant == 0 ? "rank 2 called AllReduce #0 (f32, count 999, SUM)"
                                            : "rank 2 called AllReduce #0 (f64, count 1000, SUM)";
          if (s.ok() || !Contains(s, needle)) return absl::InternalError(s.ToString());
          return absl::OkStatus();
        },
        options);
    for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
  }
}

TEST(FaultTest, SizeMismatchIsCaughtByHeadersWithoutDebugMode) {
  const std::vector<absl::Status> results = RunThreads(2, [](Communicator& comm) -> absl::Status {
    Tensor t = *Tensor::Zeros({comm.rank() == 0 ? 4096 : 4097}, DType::kF32);
    absl::Status s = comm.AllReduce(t, ReduceOp::kSum)->Wait();
    if (s.ok()) return absl::InternalError("size mismatch not detected");
    if (!Contains(s, "collective mismatch") && !Contains(s, "aborted")) return absl::InternalError(s.ToString());
    return absl::OkStatus();
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

TEST(FaultTest, AMissingPeerTimesOutNamingIt) {
  TcpCommunicatorOptions options = TestOptions();
  options.communicator.timeout = Milliseconds(500);
  std::promise<void> rank0_done;
  std::shared_future<void> done = rank0_done.get_future().share();
  const std::vector<absl::Status> results = RunThreads(
      2, [&](Communicator& comm) { return testing::MissingPeerCase(comm, rank0_done, done, "rank 1 (127.0.0.1:"); },
      options);
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

TEST(FaultTest, SameSizeDifferentDtypesFailWithoutDebugChecks) {
  const std::vector<absl::Status> results = RunThreads(2, [](Communicator& comm) -> absl::Status {
    Tensor t = *Tensor::Zeros({16}, comm.rank() == 0 ? DType::kF32 : DType::kI32);
    absl::Status s = comm.AllReduce(t, ReduceOp::kSum)->Wait();
    if (s.ok()) return absl::InternalError("f32 against i32 went unnoticed");
    if (comm.rank() == 1 && !(Contains(s, "f32") && Contains(s, "i32")) && !Contains(s, "aborted")) {
      return absl::InternalError(s.ToString());
    }
    return absl::OkStatus();
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

// A store whose host hangs: every call blocks for 10 minutes (as a stopped
// process that still accepts connections), unless the test ends first.
class HangingStore : public Store {
 public:
  ~HangingStore() override { Release(); }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  absl::Status Set(absl::string_view, absl::string_view) override { return Hang(); }
  absl::StatusOr<std::string> Get(absl::string_view, Milliseconds) override { return Hang(); }
  using Store::Get;
  absl::StatusOr<int64_t> Add(absl::string_view, int64_t) override { return Hang(); }
  absl::StatusOr<std::string> CompareSet(absl::string_view, absl::string_view, absl::string_view) override {
    return Hang();
  }
  absl::Status Wait(const std::vector<std::string>&, Milliseconds) override { return Hang(); }
  using Store::Wait;
  absl::StatusOr<bool> Check(const std::vector<std::string>&) override { return Hang(); }
  absl::StatusOr<bool> DeleteKey(absl::string_view) override { return Hang(); }
  absl::StatusOr<int64_t> NumKeys() override { return Hang(); }

 private:
  absl::Status Hang() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::minutes(10), [&] { return released_; });
    return absl::UnavailableError("store host hung");
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
};

TEST(FaultTest, AHungStoreDoesNotDelayTheErrorBeyondTheReportWindow) {
  // The op times out after 1 s; failure sharing may add at most the 200 ms
  // window, not the store's minutes. (The test's own deadline catches a hang.)
  auto transports = testing::FakeNetwork::Create(2);
  auto store = std::make_shared<HangingStore>();
  CommunicatorOptions options;
  options.timeout = Milliseconds(1000);
  options.failure_report_window = Milliseconds(200);
  auto backend = HostBackend::Create(std::move(transports[0]), {}, "fake");
  ASSERT_TRUE(backend.ok());
  auto comm = Communicator::Create(std::move(*backend), options, store);
  ASSERT_TRUE(comm.ok());
  Tensor t = *Tensor::Zeros({10}, DType::kF32);
  const auto start = std::chrono::steady_clock::now();
  const absl::Status s = (*comm)->AllReduce(t, ReduceOp::kSum)->Wait();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  // A generous bound that only a hang would break (the store blocks 10 min).
  EXPECT_LT(took, std::chrono::seconds(60));
  comm->reset();
  store->Release();
}

}  // namespace
}  // namespace lockstep
