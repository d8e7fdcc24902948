// The communicator's scheduler alone, with a runner that records what it is
// given: order and numbering, ThenWork steps' placement, point-to-point
// batches and their numbering, device operations finished in order, a broken
// queue, and Stop draining what is queued. Every wait has a deadline.
#include "collectives/internal/op_queue.h"

#include <chrono>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/internal/task_work.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace communicator_internal {
namespace {

constexpr auto kDeadline = std::chrono::seconds(30);

// A gate a runner can stop at: the test opens it.
class Gate {
 public:
  void Arrive() { arrived_.set_value(); }
  bool WaitArrived() { return arrived_.get_future().wait_for(kDeadline) == std::future_status::ready; }
  void Open() { open_.set_value(); }
  bool WaitOpen() { return opened_.wait_for(kDeadline) == std::future_status::ready; }

 private:
  std::promise<void> arrived_, open_;
  std::shared_future<void> opened_ = open_.get_future().share();
};

// Runs tasks, completes their Works and records their names and numbers.
class RecordingRunner : public OpRunner {
 public:
  void Run(QueuedOp& op) override {
    if (op.p2p) {
      std::deque<QueuedOp> batch;
      batch.push_back(std::move(op));
      queue->TakePointToPoint(&batch);
      std::vector<std::string> names;
      for (QueuedOp& p : batch) {
        names.push_back(absl::StrCat(p.p2p->send ? "send" : "recv", p.p2p->peer, "/", p.p2p->tag, "#", p.p2p->seq));
      }
      // Recorded before the Works complete: a test that waited for them
      // then reads a log that has the batch.
      Record(absl::StrCat("batch[", absl::StrJoin(names, ","), "]"));
      for (QueuedOp& p : batch) p.work->Complete(absl::OkStatus());
      return;
    }
    seqs.push_back(op.fingerprint.seq);
    OpContext ctx;
    ctx.seq = op.fingerprint.seq;
    std::function<absl::Status()> finish;
    ctx.queued = [&finish](std::shared_ptr<StreamMarker>, std::function<absl::Status()> f) { finish = std::move(f); };
    const absl::Status status = op.task->RunTask(ctx);
    if (finish) {
      queue->Defer(std::move(op), std::move(finish));
      return;
    }
    op.task->ReleaseTask();
    op.work->Complete(status);
  }
  void Finished(QueuedOp& op, absl::Status status) override {
    Record(absl::StrCat("finished #", op.fingerprint.seq, " ", status.ok() ? "ok" : status.message()));
    op.task->ReleaseTask();
    op.work->Complete(status);
  }
  void Record(std::string what) {
    std::lock_guard<std::mutex> lock(mu);
    log.push_back(std::move(what));
  }
  std::vector<std::string> Log() {
    std::lock_guard<std::mutex> lock(mu);
    return log;
  }

  OpQueue* queue = nullptr;
  std::vector<uint64_t> seqs;  // Only the running thread touches it.
  std::mutex mu;
  std::vector<std::string> log;
};

class OpQueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    runner_.queue = &queue_;
    ASSERT_TRUE(queue_.Start().ok());
  }

  // A collective that records `name` when it runs (and may stop at `gate`).
  std::shared_ptr<Work> Push(const std::string& name, Gate* gate = nullptr) {
    auto task = [this, name, gate](const OpContext&) {
      if (gate != nullptr) {
        gate->Arrive();
        if (!gate->WaitOpen()) return absl::DeadlineExceededError("the test never opened the gate");
      }
      runner_.Record(name);
      return absl::OkStatus();
    };
    auto work = std::make_shared<TaskWorkOf<decltype(task)>>(0, std::move(task));
    queue_.PushCollective(work, Collective());
    return work;
  }

  std::shared_ptr<Work> PushPointToPoint(bool send, int peer, uint32_t tag) {
    std::shared_ptr<CompletableWork> work = queue_.NewWork();
    auto p2p = std::make_unique<PointToPointOp>();
    p2p->send = send;
    p2p->peer = peer;
    p2p->tag = tag;
    Fingerprint f = Collective();
    f.op = static_cast<uint8_t>(send ? OpType::kSend : OpType::kRecv);
    queue_.PushPointToPoint(work, f, std::move(p2p));
    return work;
  }

  static Fingerprint Collective() {
    return Fingerprint{0, static_cast<uint8_t>(OpType::kBarrier), 0, 0, 0, -1, 0, 0, 0};
  }

  static void ExpectDone(Work& work) {
    ASSERT_TRUE(work.Wait(std::chrono::duration_cast<std::chrono::milliseconds>(kDeadline)).ok());
  }

  RecordingRunner runner_;
  OpQueue queue_{&runner_, /*worker_spin_microseconds=*/0, /*wait_spin_microseconds=*/0};
};

TEST_F(OpQueueTest, RunsCollectivesInCallOrderNumberedAsTheyRun) {
  std::vector<std::shared_ptr<Work>> works;
  std::vector<std::string> expected;
  for (int i = 0; i < 200; ++i) {
    works.push_back(Push(absl::StrCat("op", i)));
    expected.push_back(absl::StrCat("op", i));
  }
  for (auto& w : works) ExpectDone(*w);
  queue_.Stop();
  EXPECT_EQ(runner_.Log(), expected);
  ASSERT_EQ(runner_.seqs.size(), 200u);
  for (uint64_t i = 0; i < 200; ++i) EXPECT_EQ(runner_.seqs[i], i);
  EXPECT_EQ(queue_.counts()[static_cast<int>(OpType::kBarrier)], 200u);
}

TEST_F(OpQueueTest, AStepsOperationsRunAtItsPlaceBeforeLaterOnes) {
  Gate gate;
  std::shared_ptr<Work> a = Push("A", &gate);
  ASSERT_TRUE(gate.WaitArrived());
  // Queued while A runs: the step S (at ThenWork's call), then B. S queues
  // C1 and C2, which must run before B.
  std::shared_ptr<Work> chained = a->ThenWork([this]() -> absl::StatusOr<std::shared_ptr<Work>> {
    Push("C1");
    return Push("C2");
  });
  std::shared_ptr<Work> b = Push("B");
  gate.Open();
  ExpectDone(*chained);
  ExpectDone(*b);
  EXPECT_EQ(runner_.Log(), (std::vector<std::string>{"A", "C1", "C2", "B"}));
}

TEST_F(OpQueueTest, PointToPointBatchesStopAtTheNextCollectiveAndAreNumberedPerPeerTagAndDirection) {
  Gate gate;
  std::shared_ptr<Work> a = Push("A", &gate);
  ASSERT_TRUE(gate.WaitArrived());
  std::vector<std::shared_ptr<Work>> works = {
      PushPointToPoint(true, 1, 0),
      PushPointToPoint(true, 1, 0),
      PushPointToPoint(false, 1, 0),
      PushPointToPoint(true, 1, 7),
      Push("C"),
      PushPointToPoint(true, 1, 0),
      PushPointToPoint(false, PointToPointOp::kAnySource, 0),
  };
  gate.Open();
  for (auto& w : works) ExpectDone(*w);
  EXPECT_EQ(runner_.Log(), (std::vector<std::string>{"A", "batch[send1/0#0,send1/0#1,recv1/0#0,send1/7#0]", "C",
                                                     "batch[send1/0#2,recv-1/0#0]"}));
  queue_.Stop();
  EXPECT_EQ(queue_.counts()[static_cast<int>(OpType::kSend)], 4u);
  EXPECT_EQ(queue_.counts()[static_cast<int>(OpType::kRecv)], 2u);
}

TEST_F(OpQueueTest, DeviceOperationsFinishInOrderOnTheFinisher) {
  std::vector<std::shared_ptr<Work>> works;
  for (int i = 0; i < 20; ++i) {
    auto task = [i](const OpContext& ctx) {
      ctx.queued(nullptr, [i]() {
        return i % 3 == 2 ? absl::InternalError(absl::StrCat("device error ", i)) : absl::OkStatus();
      });
      return absl::OkStatus();
    };
    auto work = std::make_shared<TaskWorkOf<decltype(task)>>(0, std::move(task));
    queue_.PushCollective(work, Collective());
    works.push_back(work);
  }
  std::vector<std::string> expected;
  for (int i = 0; i < 20; ++i) {
    const absl::Status status = works[i]->Wait(std::chrono::duration_cast<std::chrono::milliseconds>(kDeadline));
    EXPECT_EQ(status.ok(), i % 3 != 2) << i;
    expected.push_back(absl::StrCat("finished #", i, " ", i % 3 == 2 ? absl::StrCat("device error ", i) : "ok"));
  }
  EXPECT_EQ(runner_.Log(), expected);
}

TEST_F(OpQueueTest, ABrokenQueueFailsWhatIsQueuedAndWhatComesWithTheFirstFailure) {
  Gate gate;
  std::shared_ptr<Work> a = Push("A", &gate);
  ASSERT_TRUE(gate.WaitArrived());
  std::shared_ptr<Work> b = Push("B");
  std::shared_ptr<Work> p = PushPointToPoint(true, 1, 0);
  queue_.Break(absl::UnavailableError("rank 1 died"));
  queue_.Break(absl::InternalError("a later failure"));  // The first one stays.
  gate.Open();
  ExpectDone(*a);  // It was running: its own status.
  for (Work* w : {b.get(), p.get()}) {
    const absl::Status status = w->Wait(std::chrono::duration_cast<std::chrono::milliseconds>(kDeadline));
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(status.message(), "rank 1 died");
  }
  std::shared_ptr<Work> c = Push("C");
  EXPECT_TRUE(c->IsCompleted());  // At once: nothing queued.
  EXPECT_EQ(c->status().message(), "rank 1 died");
  EXPECT_EQ(queue_.broken().message(), "rank 1 died");
  EXPECT_EQ(runner_.Log(), (std::vector<std::string>{"A"}));
}

TEST_F(OpQueueTest, StopRunsWhatIsQueuedThenRefusesSteps) {
  Gate gate;
  std::vector<std::shared_ptr<Work>> works = {Push("first", &gate)};
  ASSERT_TRUE(gate.WaitArrived());
  for (int i = 0; i < 50; ++i) works.push_back(Push(absl::StrCat("op", i)));
  std::thread stopper([this] { queue_.Stop(); });
  gate.Open();
  stopper.join();
  for (auto& w : works) EXPECT_TRUE(w->IsCompleted());
  EXPECT_EQ(runner_.Log().size(), 51u);
  // A step can no longer be queued: the chain still runs, unordered, on the
  // caller (the Work is already complete).
  bool ran = false;
  std::shared_ptr<Work> chained = works.back()->ThenWork([&ran]() -> absl::StatusOr<std::shared_ptr<Work>> {
    ran = true;
    return CompletableWork::Done(absl::OkStatus());
  });
  EXPECT_TRUE(chained->IsCompleted());
  EXPECT_TRUE(ran);
}

}  // namespace
}  // namespace communicator_internal
}  // namespace lockstep
