// Work: the handle of one asynchronous collective operation, as c10d's Work
// and its Future.
//
//   std::shared_ptr<Work> work = comm->AllReduce(grads, ReduceOp::kSum);
//   ...                              // overlap other work
//   LOCKSTEP_RETURN_IF_ERROR(work->Wait());
//
//   // A comm hook: decompress when the all-reduce of a bucket ends.
//   std::shared_ptr<Work> done = comm->AllReduce(half, ReduceOp::kSum)->Then(
//       [=]() { return full.CopyFrom(half); });
//
// Contract:
//   * Wait(timeout) blocks until the operation finished or `timeout` passed.
//     It returns the operation's final status, or DeadlineExceeded if it is
//     still running (the operation itself goes on and will finish or fail
//     by its own deadline, the communicator's timeout). Wait() without a
//     timeout waits for that final status, so it cannot hang forever.
//   * IsCompleted() never blocks. status() is the final status once
//     IsCompleted() is true, Unavailable before.
//   * Once Wait() returns or IsCompleted() is true, the callbacks given
//     before completion (Then's and ThenWork's fn, WhenDone's) have run
//     and been destroyed, with what they captured: nothing of the
//     operation is left on the thread that completed it (a bridge's Python
//     tensors are released before its caller goes on). So a callback must
//     not wait on the Work it was given to.
//   * Then(fn) returns a new Work that completes after this one and `fn`:
//     fn runs exactly once, only if this work succeeded, on the thread that
//     completes this work (the communicator's thread, or a thread waiting
//     on one of its Works that ran it; or at once, on the caller's thread,
//     if already complete). fn must not block on other
//     operations of the same communicator (they queue behind it), but may
//     start new ones. The chained Work's status is this work's error, or
//     fn's status.
//   * ThenWork(fn) chains a further operation: fn runs once, only after
//     this work succeeded, and returns the Work of what it started
//     (collectives, another chain, a WorkPromise's Work) or an error. The
//     chained Work completes when that Work does, with its status; fn's
//     error, or this work's, completes it at once. fn must not wait: it
//     returns at once (a two-round comm hook, PowerSGD's all-reduce,
//     compute, all-reduce, never blocks the communicator's thread).
//     Ordering, for a Work of a communicator: fn runs on the communicator's
//     thread (or a waiting caller that runs its queue) as a step queued
//     where ThenWork was called, and the collectives fn starts on that
//     communicator run right after it, before anything queued later. So
//     every rank runs the same collectives in the same order however the
//     threads interleave, as long as each rank calls the collectives and
//     ThenWork in the same order: several chains in flight at once (one per
//     DDP bucket) cannot mismatch. (If this work is still running on a
//     device when its step comes, fn runs when it completes instead, on
//     that thread, unordered.) For any other Work, fn runs on the thread
//     that completes it. Waiting on the chained Work helps run the queued
//     operations it depends on, as Wait does.
//   * A Work of one's own (a custom comm hook's, say) comes from a
//     WorkPromise (collectives/work_promise.h), which completes it once.
//   * Output tensors must not be read or written until the work completed,
//     except by device work ordered after it with SynchronizeStream.
//   * SynchronizeStream(stream) makes work queued later on a CUDA stream
//     wait for the operation. On a backend that runs on the device (NCCL,
//     with CUDA tensors only) it blocks the host only until the operation
//     is queued there, then returns: the stream waits on a CUDA event, and
//     an error found later (the watchdog's timeout, a peer that failed)
//     surfaces at Wait() and at the communicator's next operation. Anywhere
//     else (host backends, CPU tensors staged through the device, chained
//     Works) it is Wait(): the result is already in place when it returns.
//
// Users cannot complete a Work they were given: backends complete theirs
// through CompletableWork (collectives/completable_work.h, visible to the
// collectives packages); a WorkPromise completes only the Work it made.
#ifndef LOCKSTEP_COLLECTIVES_WORK_H_
#define LOCKSTEP_COLLECTIVES_WORK_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/stream_marker.h"

namespace lockstep {

class Work : public std::enable_shared_from_this<Work> {
 public:
  virtual ~Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  absl::Status Wait();
  absl::Status Wait(std::chrono::milliseconds timeout);
  bool IsCompleted();
  absl::Status status();
  // The rank a completed receive's message came from (Communicator::Recv,
  // RecvAnySource); -1 before then and for every other operation.
  int source_rank() const { return source_rank_.load(std::memory_order_acquire); }

  std::shared_ptr<Work> Then(std::function<absl::Status()> fn);
  // See the contract above: fn's Work (or error) is the chained Work's.
  std::shared_ptr<Work> ThenWork(std::function<absl::StatusOr<std::shared_ptr<Work>>()> fn);
  // Runs `fn` once with the final status, success or not: on the thread
  // that completes this work, or at once on the caller if it already has.
  // For bridges to other futures (interop/torch's c10d::Work completes its
  // torch Future here); fn may do what Then's fn may, and must not throw.
  void WhenDone(std::function<void(const absl::Status&)> fn) { OnComplete(std::move(fn)); }

  // What a waiting thread may run while it waits (SetHelper, below).
  using Helper = std::function<void(Work* awaited)>;
  // Queues `run` as a step of this work's communicator, after every
  // operation queued so far (SetSequencer, below); false: it could not.
  using Sequencer = std::function<bool(std::function<void()> run)>;

  // Makes work queued later on the CUDA stream `stream` (a cudaStream_t;
  // nullptr: the legacy default stream) wait for this operation; see the
  // contract above. Returns the operation's error if it failed before it
  // was queued on the device.
  virtual absl::Status SynchronizeStream(void* stream);

 protected:
  // `spin_microseconds`: how long Wait() checks for completion, yielding the
  // core between checks, before it sleeps (0: sleep at once).
  explicit Work(int spin_microseconds) : spin_microseconds_(spin_microseconds) {}

  // Records the final status, runs the callbacks and destroys them, then
  // wakes waiters, once: later calls are ignored.
  void Complete(absl::Status status);
  // Before Complete: see source_rank().
  void SetSourceRank(int rank) { source_rank_.store(rank, std::memory_order_release); }

  // Runs `callback` with the final status once this work completed: at once
  // on the caller if it already has, else on the completing thread.
  void OnComplete(std::function<void(const absl::Status&)> callback);

  // Called by Wait() (without a timeout) before it spins or sleeps: lets the
  // waiting thread run queued operations itself when the backend's own
  // thread is idle, saving two thread wake-ups per small operation. Chained
  // Works inherit it. Set before the Work is shared.
  // The helper is told which Work is being waited on (this one, or a Work
  // chained from it).
  void SetHelper(Helper helper) { helper_ = std::make_shared<const Helper>(std::move(helper)); }
  // The same helper for many Works: shared, not copied (no allocation per
  // Work).
  void SetHelper(std::shared_ptr<const Helper> helper) { helper_ = std::move(helper); }

  // Makes ThenWork's continuations ordered: they run as steps of the
  // communicator's queue, at the place ThenWork was called, and what they
  // start runs right after them (see the contract). Chained Works inherit
  // it. Set before the Work is shared.
  void SetSequencer(std::shared_ptr<const Sequencer> sequencer) { sequencer_ = std::move(sequencer); }

  // Called by a device backend once the operation is queued on its stream,
  // before it completes: SynchronizeStream then waits on `marker` instead
  // of the host. Ignored after Complete.
  void SetStreamMarker(std::shared_ptr<StreamMarker> marker);

 private:
  // Wait() never busy-spins: it yields between checks, so a worker thread
  // sharing the waiter's core runs first (docs/PERFORMANCE.md), and then
  // sleeps.
  void SpinUntilDone(std::chrono::microseconds limit);

  const int spin_microseconds_;
  std::shared_ptr<const Helper> helper_;
  std::shared_ptr<const Sequencer> sequencer_;
  std::mutex mu_;
  std::condition_variable done_cv_;
  bool completing_ = false;               // Status recorded, callbacks running.
  bool done_ = false;                     // Callbacks ran; waiters may go on.
  std::shared_ptr<StreamMarker> marker_;  // Set while queued on a device.
  std::atomic<bool> done_flag_{false};
  std::atomic<int> source_rank_{-1};
  absl::Status status_;
  std::vector<std::function<void(const absl::Status&)>> callbacks_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_WORK_H_
