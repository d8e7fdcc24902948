// OpQueue: the communicator's scheduler. Internal to //collectives:communicator.
//
// Operations are queued in call order and run one at a time, in that order,
// by whichever thread gets there first: the queue's worker thread, or a
// caller that waits on one of the queue's Works while the worker is idle
// (that caller runs queued operations itself instead of sleeping: a futex
// wake-up costs tens of microseconds on these VMs). What running means
// belongs to an OpRunner (the communicator); the queue owns the order:
//   - collectives are numbered when taken, in the order every rank shares;
//   - a ThenWork step runs on the taking thread, and what it queues goes at
//     its place, before anything queued meanwhile (work.h: SetSequencer);
//   - point-to-point operations are numbered per (peer, tag, direction) when
//     posted; a batch of them takes those queued after it, up to the next
//     collective or step, and is woken through an eventfd when more come;
//   - an operation queued on a device is finished, in order, by a second
//     thread (the finisher) while the next ones run;
//   - once broken, every operation fails with the first failure.
//
//   OpQueue queue(&runner, /*worker_spin_microseconds=*/50, /*wait_spin_microseconds=*/100);
//   LOCKSTEP_RETURN_IF_ERROR(queue.Start());
//   queue.PushCollective(task_work, fingerprint);  // runner.Run(op) soon, on some thread.
//   queue.Stop();  // Runs what is queued, then joins both threads.
#ifndef LOCKSTEP_COLLECTIVES_INTERNAL_OP_QUEUE_H_
#define LOCKSTEP_COLLECTIVES_INTERNAL_OP_QUEUE_H_

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "collectives/backend.h"
#include "collectives/completable_work.h"
#include "collectives/internal/fingerprint.h"
#include "collectives/internal/ring_queue.h"
#include "collectives/internal/task_work.h"
#include "collectives/work.h"
#include "core/fd.h"

namespace lockstep {
namespace communicator_internal {

// One queued operation, of one of three kinds: a collective (task set), a
// point-to-point operation (p2p set) or a ThenWork step (continuation set,
// work null). The rarer two live behind pointers: a collective's entry,
// moved into the queue and out of it for every operation, stays a few words.
struct QueuedOp {
  std::shared_ptr<CompletableWork> work;
  TaskWork* task = nullptr;  // Inside `work`.
  Fingerprint fingerprint;
  uint64_t record = 0;  // Its flight recorder entry, once it runs.
  std::unique_ptr<PointToPointOp> p2p;
  std::unique_ptr<std::function<void()>> continuation;
};

// What the queue calls to run operations (the communicator).
class OpRunner {
 public:
  virtual ~OpRunner() = default;
  // Runs a collective (op.task set) or a point-to-point batch that starts
  // with `op` (op.p2p set), on the worker or on a helping caller, outside
  // the queue's lock. The group was healthy when the queue took it.
  virtual void Run(QueuedOp& op) = 0;
  // A collective handed to Defer ended on its device with `status`; called
  // on the finisher thread, in the order of Defer.
  virtual void Finished(QueuedOp& op, absl::Status status) = 0;
};

class OpQueue {
 public:
  // `runner` outlives the queue. Spins as CommunicatorOptions' fields of
  // the same names.
  OpQueue(OpRunner* runner, int worker_spin_microseconds, int wait_spin_microseconds);
  ~OpQueue();  // Stop().
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  // Starts the worker thread.
  absl::Status Start();
  // No Work helps or chains onto this queue any more; what is queued runs,
  // then the worker, then the finisher (after the device's operations) stop.
  // Idempotent.
  void Stop();

  // A Work whose waiters help this queue and whose ThenWork steps go
  // through it.
  std::shared_ptr<CompletableWork> NewWork();
  // Queues a collective (numbered when taken); once broken, completes it
  // with the failure instead.
  void PushCollective(const std::shared_ptr<TaskWork>& work, const Fingerprint& fingerprint);
  // Queues a point-to-point operation and numbers it (fingerprint.seq and
  // p2p->seq) per (peer, tag) and direction; once broken, completes `work`
  // with the failure instead.
  void PushPointToPoint(std::shared_ptr<CompletableWork> work, Fingerprint fingerprint,
                        std::unique_ptr<PointToPointOp> p2p);

  // For the running point-to-point batch: readable when more were posted;
  // Take moves the point-to-point operations at the queue's front (up to
  // the next collective or step) into `into`.
  int wake_fd() const { return wake_.get(); }
  void TakePointToPoint(std::deque<QueuedOp>* into);
  void SetPointToPointRunning(bool running);

  // Hands a collective that its runner queued on a device to the finisher
  // thread, which calls `finish` (waits for the device) and then the
  // runner's Finished.
  void Defer(QueuedOp op, std::function<absl::Status()> finish);

  // The first failure (OK while healthy); Break keeps the first one given.
  absl::Status broken();
  void Break(const absl::Status& status);

  // Collectives run and point-to-point operations posted, by OpType (for
  // the closing summary; read after Stop).
  const std::array<uint64_t, kOpTypes>& counts() const { return op_counts_; }

 private:
  // An operation queued on a device, and how to wait for its end.
  struct Deferred {
    QueuedOp op;
    std::function<absl::Status()> finish;
  };
  // Lets Works reach this queue while it runs.
  struct Gate {
    std::mutex mu;
    OpQueue* queue = nullptr;
  };

  // Queues a ThenWork step (Work::Sequencer); false once broken or stopped.
  bool PushStep(std::function<void()> run);
  // Under mu_: appends `op`, or, while a ThenWork step runs on this thread,
  // puts it right after what that step queued so far.
  void PushLocked(QueuedOp op);
  // Under mu_, by the thread that becomes the runner (running_): takes the
  // queue's front, numbers a collective and notes in *broken whether the
  // group is broken, all in one critical section with the take.
  QueuedOp TakeFrontLocked(absl::Status* broken);
  // Runs what TakeFrontLocked took, outside mu_.
  void RunTaken(QueuedOp& op, const absl::Status& broken);
  // Runs queued operations on the calling thread while no other thread runs
  // one and `awaited` is not complete.
  void HelpUntilDone(Work* awaited);
  void WorkerLoop();
  void FinisherLoop();

  OpRunner* const runner_;
  const int worker_spin_microseconds_;
  const int wait_spin_microseconds_;

  std::mutex mu_;  // Guards everything down to worker_.
  std::condition_variable work_cv_;
  RingQueue<QueuedOp> queue_;  // No allocation per operation.
  uint64_t next_seq_ = 0;
  std::array<uint64_t, kOpTypes> op_counts_ = {};
  // Point to point: numbered per (peer, tag) and direction, in call order.
  std::map<std::pair<int, uint32_t>, uint64_t> send_seq_, recv_seq_;
  std::map<uint32_t, uint64_t> recv_any_seq_;  // RecvAnySource, per tag.
  bool stopping_ = false;
  bool running_ = false;  // An operation runs (worker or helping caller).
  // The worker waits on work_cv_ (or is about to): only then does a new
  // operation notify it (a notification costs a call into the C library
  // even when nobody waits).
  bool worker_sleeping_ = false;
  bool p2p_running_ = false;  // A batch takes newly posted Send/Recv.
  absl::Status broken_;
  // Guarded by mu_: the thread running a ThenWork step (none: default), and
  // how many operations it has queued (they go to the queue's front).
  std::thread::id step_thread_;
  size_t step_queued_ = 0;
  std::thread worker_;

  Fd wake_;  // eventfd: a Send/Recv was posted while a batch runs.
  // Mirrors of queue_.size() and stopping_ for the worker's lock-free spin,
  // whether a waiting caller runs an operation, and how many operations
  // were queued so far (new work restarts the worker's spin).
  std::atomic<size_t> queue_size_{0};
  std::atomic<bool> stopping_flag_{false};
  std::atomic<bool> helping_{false};
  std::atomic<uint64_t> enqueued_{0};

  std::shared_ptr<Gate> help_gate_;
  std::shared_ptr<const Work::Helper> helper_;  // Given to every Work.
  // The same for ThenWork's steps: a separate gate, since a step may chain
  // more while a waiting caller (holding help_gate_) runs it.
  std::shared_ptr<Gate> sequence_gate_;
  std::shared_ptr<const Work::Sequencer> sequencer_;  // Given to every Work.

  // Operations a device backend queued, finished in order by finisher_,
  // which starts with the first of them.
  std::mutex finish_mu_;  // Guards the three below.
  std::condition_variable finish_cv_;
  std::deque<Deferred> to_finish_;
  bool finisher_stop_ = false;
  std::thread finisher_;
};

}  // namespace communicator_internal
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_INTERNAL_OP_QUEUE_H_
