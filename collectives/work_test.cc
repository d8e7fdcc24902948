// Work: Wait with and without a timeout, status before completion, Then
// chains (once, in order, at once when already complete, errors propagate),
// completing twice, Then callbacks that start more work, ThenWork chains
// (the chained Work follows the continuation's Work; every error on the
// way ends it) and WorkPromise.
#include "collectives/work.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "collectives/completable_work.h"
#include "collectives/work_promise.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using std::chrono::milliseconds;

TEST(WorkTest, StatusBeforeCompletionIsUnavailableAndWaitTimesOut) {
  auto work = CompletableWork::Create();
  EXPECT_FALSE(work->IsCompleted());
  EXPECT_EQ(work->status().code(), absl::StatusCode::kUnavailable);
  const absl::Status s = work->Wait(milliseconds(20));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_FALSE(work->IsCompleted());
}

TEST(WorkTest, WaitReturnsTheFinalStatusFromAnotherThread) {
  auto work = CompletableWork::Create(/*spin_microseconds=*/50);
  std::thread completer([work] { work->Complete(absl::DataLossError("bits flipped")); });
  const absl::Status s = work->Wait();
  completer.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(work->IsCompleted());
  EXPECT_EQ(work->status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(work->Wait(milliseconds(1)).code(), absl::StatusCode::kDataLoss);
}

// Records, when destroyed, whether `watched` counted as completed then.
struct DestructionProbe {
  Work* watched = nullptr;
  std::atomic<int>* destroyed_after_completion = nullptr;
  std::atomic<int>* destroyed = nullptr;
  ~DestructionProbe() {
    if (watched == nullptr) return;
    if (watched->IsCompleted()) destroyed_after_completion->fetch_add(1);
    destroyed->fetch_add(1);
  }
};

TEST(WorkTest, CallbacksAndWhatTheyHoldAreGoneBeforeWaitersWake) {
  // A bridge's callback holds objects another runtime must free (Python's
  // tensors): they are freed on the completing thread before any waiter
  // can go on, so never after it did.
  auto work = CompletableWork::Create();
  std::atomic<int> late{0};
  std::atomic<int> destroyed{0};
  std::atomic<int> ran{0};
  for (int i = 0; i < 3; ++i) {
    auto probe = std::make_shared<DestructionProbe>();
    probe->watched = work.get();
    probe->destroyed_after_completion = &late;
    probe->destroyed = &destroyed;
    work->WhenDone([probe, &ran](const absl::Status&) { ran.fetch_add(1); });
  }
  std::thread completer([work] { work->Complete(absl::OkStatus()); });
  EXPECT_TRUE(work->Wait().ok());
  EXPECT_EQ(ran.load(), 3);
  EXPECT_EQ(destroyed.load(), 3);  // Before Wait returned.
  EXPECT_EQ(late.load(), 0);
  completer.join();
}

TEST(WorkTest, ThenAndThenWorkReleaseTheirFunctionBeforeTheChainedWorkCompletes) {
  std::atomic<int> late{0};
  std::atomic<int> destroyed{0};
  auto first = CompletableWork::Create();
  auto probe = std::make_shared<DestructionProbe>();
  probe->destroyed_after_completion = &late;
  probe->destroyed = &destroyed;
  DestructionProbe* raw = probe.get();
  std::shared_ptr<Work> chained = first->Then([probe = std::move(probe)] { return absl::OkStatus(); });
  raw->watched = chained.get();

  auto inner = CompletableWork::Create();
  auto probe2 = std::make_shared<DestructionProbe>();
  probe2->destroyed_after_completion = &late;
  probe2->destroyed = &destroyed;
  DestructionProbe* raw2 = probe2.get();
  std::shared_ptr<Work> chained_work =
      first->ThenWork([probe2 = std::move(probe2), inner]() -> absl::StatusOr<std::shared_ptr<Work>> { return inner; });
  raw2->watched = chained_work.get();

  first->Complete(absl::OkStatus());
  EXPECT_TRUE(chained->IsCompleted());
  EXPECT_FALSE(chained_work->IsCompleted());
  EXPECT_EQ(destroyed.load(), 2);  // ThenWork's fn is gone once it ran.
  inner->Complete(absl::OkStatus());
  EXPECT_TRUE(chained_work->Wait().ok());
  EXPECT_EQ(late.load(), 0);
}

TEST(WorkTest, AWorkOwnedOnlyByItsCallbackCompletes) {
  // A bridge that owns the work, owned by the work's callback (interop's
  // TorchWork once Python dropped it): completing it frees it, after it
  // finished completing. Allocated on its own (not make_shared, whose block
  // outlives the object while weak references remain), so that ASan sees a
  // use after free if Complete touched it after the callbacks went.
  struct Tracked : CompletableWork {
    explicit Tracked(bool* destroyed) : destroyed(destroyed) {}
    ~Tracked() override { *destroyed = true; }
    bool* destroyed;
  };
  bool destroyed = false;
  bool ran = false;
  std::shared_ptr<Tracked> work(new Tracked(&destroyed));
  Tracked* raw = work.get();
  raw->WhenDone([work, &ran](const absl::Status& s) { ran = s.ok(); });
  work.reset();
  ASSERT_FALSE(destroyed);
  raw->Complete(absl::OkStatus());
  EXPECT_TRUE(ran);
  EXPECT_TRUE(destroyed);
}

TEST(WorkTest, ACallbackGivenWhileCallbacksRunRunsAtOnce) {
  auto work = CompletableWork::Create();
  std::vector<int> order;
  work->WhenDone([&](const absl::Status&) {
    order.push_back(1);
    work->WhenDone([&](const absl::Status& s) { order.push_back(s.ok() ? 2 : -2); });
    order.push_back(3);
  });
  work->Complete(absl::OkStatus());
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST(WorkTest, OnlyTheFirstCompletionCounts) {
  auto work = CompletableWork::Create();
  work->Complete(absl::OkStatus());
  work->Complete(absl::InternalError("late"));
  EXPECT_TRUE(work->status().ok());
}

TEST(WorkTest, ThenRunsOnceOnTheCompletingThreadAfterSuccess) {
  auto work = CompletableWork::Create();
  std::atomic<int> runs{0};
  std::thread::id ran_on;
  std::shared_ptr<Work> chained = work->Then([&] {
    ++runs;
    ran_on = std::this_thread::get_id();
    return absl::OkStatus();
  });
  EXPECT_EQ(runs.load(), 0);
  EXPECT_FALSE(chained->IsCompleted());
  std::thread completer([work] { work->Complete(absl::OkStatus()); });
  const std::thread::id completer_id = completer.get_id();
  completer.join();
  EXPECT_TRUE(chained->Wait(milliseconds(1000)).ok());
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(ran_on, completer_id);
}

TEST(WorkTest, ThenOnACompletedWorkRunsAtOnceOnTheCaller) {
  auto work = CompletableWork::Create();
  work->Complete(absl::OkStatus());
  std::thread::id ran_on;
  std::shared_ptr<Work> chained = work->Then([&] {
    ran_on = std::this_thread::get_id();
    return absl::OkStatus();
  });
  EXPECT_TRUE(chained->IsCompleted());
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(WorkTest, ErrorsPropagateWithoutRunningTheCallback) {
  auto work = CompletableWork::Create();
  bool ran = false;
  std::shared_ptr<Work> last = work->Then([&] {
                                     ran = true;
                                     return absl::OkStatus();
                                   })
                                   ->Then([&] {
                                     ran = true;
                                     return absl::OkStatus();
                                   });
  work->Complete(absl::UnavailableError("rank 1 died"));
  const absl::Status s = last->Wait(milliseconds(1000));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "rank 1 died");
  EXPECT_FALSE(ran);
}

TEST(WorkTest, ACallbackErrorFailsTheChainFromThere) {
  auto work = CompletableWork::Create();
  int order = 0, first = -1, second = -1;
  std::shared_ptr<Work> a = work->Then([&] {
    first = order++;
    return absl::InvalidArgumentError("decompression failed");
  });
  std::shared_ptr<Work> b = a->Then([&] {
    second = order++;
    return absl::OkStatus();
  });
  work->Complete(absl::OkStatus());
  EXPECT_TRUE(work->status().ok());
  EXPECT_EQ(a->status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b->status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(first, 0);
  EXPECT_EQ(second, -1);
}

TEST(WorkTest, SeveralCallbacksRunInRegistrationOrder) {
  auto work = CompletableWork::Create();
  std::vector<int> order;
  auto a = work->Then([&] {
    order.push_back(1);
    return absl::OkStatus();
  });
  auto b = work->Then([&] {
    order.push_back(2);
    return absl::OkStatus();
  });
  work->Complete(absl::OkStatus());
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(WorkTest, ACallbackMayStartAndChainMoreWork) {
  auto first = CompletableWork::Create();
  auto second = CompletableWork::Create();
  std::shared_ptr<Work> tail;
  std::shared_ptr<Work> chained = first->Then([&] {
    // What a comm hook does: launch the next operation from the callback.
    tail = second->Then([] { return absl::OkStatus(); });
    return absl::OkStatus();
  });
  first->Complete(absl::OkStatus());
  ASSERT_NE(tail, nullptr);
  EXPECT_TRUE(chained->IsCompleted());
  EXPECT_FALSE(tail->IsCompleted());
  second->Complete(absl::OkStatus());
  EXPECT_TRUE(tail->Wait(milliseconds(1000)).ok());
}

TEST(WorkTest, ThenWorkCompletesWithTheContinuationsWork) {
  auto first = CompletableWork::Create();
  WorkPromise second;
  std::thread::id ran_on;
  std::shared_ptr<Work> chained = first->ThenWork([&]() -> absl::StatusOr<std::shared_ptr<Work>> {
    ran_on = std::this_thread::get_id();
    return second.work();
  });
  std::thread completer([&] { first->Complete(absl::OkStatus()); });
  completer.join();
  EXPECT_NE(ran_on, std::this_thread::get_id());  // On the completing thread.
  EXPECT_FALSE(chained->IsCompleted());           // It follows the second round now.
  second.Complete(absl::DataLossError("second round"));
  EXPECT_EQ(chained->Wait(milliseconds(1000)).code(), absl::StatusCode::kDataLoss);
}

TEST(WorkTest, ThenWorkChainsOfThreeRoundsEndOk) {
  WorkPromise rounds[3];
  int ran = 0;
  std::shared_ptr<Work> chain = rounds[0]
                                    .work()
                                    ->ThenWork([&]() -> absl::StatusOr<std::shared_ptr<Work>> {
                                      ++ran;
                                      return rounds[1].work();
                                    })
                                    ->ThenWork([&]() -> absl::StatusOr<std::shared_ptr<Work>> {
                                      ++ran;
                                      return rounds[2].work();
                                    });
  for (WorkPromise& r : rounds) {
    EXPECT_FALSE(chain->IsCompleted());
    r.Complete(absl::OkStatus());
  }
  EXPECT_TRUE(chain->Wait(milliseconds(1000)).ok());
  EXPECT_EQ(ran, 2);
}

TEST(WorkTest, ThenWorkErrorsEndTheChainWhereTheyHappen) {
  {  // The first round failed: the continuation never runs.
    bool ran = false;
    auto first = CompletableWork::Create();
    std::shared_ptr<Work> chained = first->ThenWork([&]() -> absl::StatusOr<std::shared_ptr<Work>> {
      ran = true;
      return CompletableWork::Done(absl::OkStatus());
    });
    first->Complete(absl::UnavailableError("peer gone"));
    EXPECT_EQ(chained->Wait(milliseconds(1000)).code(), absl::StatusCode::kUnavailable);
    EXPECT_FALSE(ran);
  }
  {  // The continuation fails before starting anything.
    std::shared_ptr<Work> chained =
        CompletableWork::Done(absl::OkStatus())->ThenWork([]() -> absl::StatusOr<std::shared_ptr<Work>> {
          return absl::InvalidArgumentError("bad bucket");
        });
    EXPECT_EQ(chained->Wait(milliseconds(1000)).code(), absl::StatusCode::kInvalidArgument);
  }
  {  // It returns no Work.
    std::shared_ptr<Work> chained =
        CompletableWork::Done(absl::OkStatus())->ThenWork([]() -> absl::StatusOr<std::shared_ptr<Work>> {
          return std::shared_ptr<Work>();
        });
    EXPECT_EQ(chained->Wait(milliseconds(1000)).code(), absl::StatusCode::kInternal);
  }
}

TEST(WorkTest, APromiseDestroyedBeforeCompletingCancelsItsWork) {
  std::shared_ptr<Work> work;
  {
    WorkPromise promise;
    work = promise.work();
    EXPECT_FALSE(work->IsCompleted());
  }
  EXPECT_EQ(work->Wait(milliseconds(1000)).code(), absl::StatusCode::kCancelled);
  WorkPromise once;
  once.Complete(absl::OkStatus());
  once.Complete(absl::InternalError("ignored"));
  EXPECT_TRUE(once.work()->Wait().ok());
}

TEST(WorkTest, AChainedWorkTellsTheHelperItselfNotItsParent) {
  // The parent may be gone while a chained Work is waited on: the helper
  // must be asked about the Work actually awaited. Here the helper plays
  // the communicator running the queued operation (completing the parent).
  std::vector<Work*> asked;
  auto parent = CompletableWork::Create();
  CompletableWork* raw_parent = parent.get();
  parent->SetHelper([&](Work* awaited) {
    asked.push_back(awaited);
    raw_parent->Complete(absl::OkStatus());
  });
  std::shared_ptr<Work> chained = parent->Then([] { return absl::OkStatus(); });
  EXPECT_TRUE(chained->Wait().ok());
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0], chained.get());
}

TEST(WorkTest, SynchronizeStreamWithoutADeviceBackendWaitsOnTheHost) {
  auto work = CompletableWork::Create();
  std::thread completer([work] { work->Complete(absl::OkStatus()); });
  EXPECT_TRUE(work->SynchronizeStream(nullptr).ok());
  completer.join();
}

// A device event stand-in: records which streams were made to wait on it.
class RecordingMarker final : public StreamMarker {
 public:
  absl::Status MakeStreamWait(void* stream) override {
    streams.push_back(stream);
    return absl::OkStatus();
  }
  std::vector<void*> streams;
};

TEST(WorkTest, SynchronizeStreamWaitsOnTheDeviceMarkerWithoutCompleting) {
  auto work = CompletableWork::Create();
  auto marker = std::make_shared<RecordingMarker>();
  int stream = 0;
  std::thread backend([&] { work->SetStreamMarker(marker); });
  // Blocks only until the operation is queued on the device.
  EXPECT_TRUE(work->SynchronizeStream(&stream).ok());
  backend.join();
  EXPECT_FALSE(work->IsCompleted());
  EXPECT_EQ(marker->streams, std::vector<void*>{&stream});
  work->Complete(absl::OkStatus());
  EXPECT_TRUE(work->Wait().ok());
}

TEST(WorkTest, SynchronizeStreamReportsAFailureBeforeTheOperationWasQueued) {
  auto work = CompletableWork::Create();
  work->Complete(absl::UnavailableError("rank 1 failed"));
  auto marker = std::make_shared<RecordingMarker>();
  work->SetStreamMarker(marker);  // Too late: ignored.
  absl::Status s = work->SynchronizeStream(nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(marker->streams.empty());
}

TEST(WorkTest, SynchronizeStreamAfterCompletionNeedsNoStreamWait) {
  auto work = CompletableWork::Create();
  auto marker = std::make_shared<RecordingMarker>();
  work->SetStreamMarker(marker);
  work->Complete(absl::OkStatus());  // The event fired: the result is in place.
  EXPECT_TRUE(work->SynchronizeStream(nullptr).ok());
  EXPECT_TRUE(marker->streams.empty());
}

TEST(WorkTest, ChainedWorkSynchronizesOnTheHost) {
  auto work = CompletableWork::Create();
  auto marker = std::make_shared<RecordingMarker>();
  work->SetStreamMarker(marker);
  bool ran = false;
  std::shared_ptr<Work> chained = work->Then([&] {
    ran = true;
    return absl::OkStatus();
  });
  std::thread completer([work] { work->Complete(absl::OkStatus()); });
  // The callback runs on the host, so the chained Work has no device marker.
  EXPECT_TRUE(chained->SynchronizeStream(nullptr).ok());
  completer.join();
  EXPECT_TRUE(ran);
  EXPECT_TRUE(marker->streams.empty());
}

}  // namespace
}  // namespace lockstep
