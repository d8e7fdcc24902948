#include "collectives/internal/op_queue.h"

#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/deadline.h"

namespace lockstep {
namespace communicator_internal {

OpQueue::OpQueue(OpRunner* runner, int worker_spin_microseconds, int wait_spin_microseconds)
    : runner_(runner),
      worker_spin_microseconds_(worker_spin_microseconds),
      wait_spin_microseconds_(wait_spin_microseconds),
      help_gate_(std::make_shared<Gate>()),
      sequence_gate_(std::make_shared<Gate>()) {
  help_gate_->queue = this;
  sequence_gate_->queue = this;
  std::weak_ptr<Gate> sequence_gate = sequence_gate_;
  sequencer_ = std::make_shared<const Work::Sequencer>([sequence_gate](std::function<void()> run) {
    std::shared_ptr<Gate> g = sequence_gate.lock();
    if (g == nullptr) return false;
    std::lock_guard<std::mutex> lock(g->mu);
    return g->queue != nullptr && g->queue->PushStep(std::move(run));
  });
  // The waiting thread runs queued operations itself while the worker is
  // idle (Work::SetHelper). The gate outlives the queue: a Work waited on
  // after it is gone helps nobody. The awaited Work is passed at each call
  // (not captured): a Work chained from another inherits the helper and
  // must be the one checked, since the other may be gone by then. One
  // helper serves every Work, and owns the gate (a mutex and a pointer): no
  // weak_ptr to lock on every Wait.
  helper_ = std::make_shared<const Work::Helper>([g = help_gate_](Work* awaited) {
    // try_lock: a Then callback that waits inside a helped operation must
    // not deadlock on the gate; it simply waits without helping.
    std::unique_lock<std::mutex> lock(g->mu, std::try_to_lock);
    if (lock.owns_lock() && g->queue != nullptr) g->queue->HelpUntilDone(awaited);
  });
}

OpQueue::~OpQueue() { Stop(); }

absl::Status OpQueue::Start() {
  const int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    return absl::InternalError(absl::StrCat("Communicator::Create: eventfd failed: ", std::strerror(errno)));
  }
  wake_ = Fd(wake);
  worker_ = std::thread([this] { WorkerLoop(); });
  return absl::OkStatus();
}

void OpQueue::Stop() {
  {
    // No waiting caller may start an operation from now on.
    std::lock_guard<std::mutex> gate(help_gate_->mu);
    help_gate_->queue = nullptr;
  }
  {
    // Nor queue a ThenWork step (the chain then goes on unordered).
    std::lock_guard<std::mutex> gate(sequence_gate_->mu);
    sequence_gate_->queue = nullptr;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    stopping_flag_.store(true, std::memory_order_release);
  }
  work_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  // Then the operations still on the device (each ends by its deadline).
  {
    std::lock_guard<std::mutex> lock(finish_mu_);
    finisher_stop_ = true;
  }
  finish_cv_.notify_all();
  if (finisher_.joinable()) finisher_.join();
}

std::shared_ptr<CompletableWork> OpQueue::NewWork() {
  auto work = CompletableWork::Create(wait_spin_microseconds_);
  work->SetHelper(helper_);
  work->SetSequencer(sequencer_);
  return work;
}

absl::Status OpQueue::broken() {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

void OpQueue::Break(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_.ok()) broken_ = status;
}

void OpQueue::PushLocked(QueuedOp op) {
  if (step_thread_ == std::this_thread::get_id()) {
    queue_.insert(step_queued_++, std::move(op));
  } else {
    queue_.push_back(std::move(op));
  }
  queue_size_.store(queue_.size(), std::memory_order_release);
  enqueued_.store(enqueued_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);  // Under mu_.
}

bool OpQueue::PushStep(std::function<void()> run) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok() || stopping_) return false;
    QueuedOp op;
    op.continuation = std::make_unique<std::function<void()>>(std::move(run));
    PushLocked(std::move(op));
    wake = worker_sleeping_;
  }
  if (wake) work_cv_.notify_one();
  return true;
}

void OpQueue::PushCollective(const std::shared_ptr<TaskWork>& work, const Fingerprint& fingerprint) {
  work->SetHelper(helper_);
  work->SetSequencer(sequencer_);
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) {
      work->ReleaseTask();
      work->Complete(broken_);
      return;
    }
    // Numbered when it runs (TakeFrontLocked): the order that every rank shares.
    QueuedOp op;
    op.task = work.get();
    op.work = work;
    op.fingerprint = fingerprint;
    PushLocked(std::move(op));
    wake = worker_sleeping_;
  }
  if (wake) work_cv_.notify_one();
}

void OpQueue::PushPointToPoint(std::shared_ptr<CompletableWork> work, Fingerprint fingerprint,
                               std::unique_ptr<PointToPointOp> p2p) {
  bool wake_batch = false, wake_worker = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) {
      work->Complete(broken_);
      return;
    }
    // Point-to-point messages are numbered per (peer, tag) and direction,
    // not in the collective sequence (only two ranks take part). A send's
    // number travels with it; a receive's only names it in messages.
    const int peer = p2p->peer;
    const uint32_t tag = p2p->tag;
    const uint64_t seq = p2p->send                            ? send_seq_[{peer, tag}]++
                         : peer == PointToPointOp::kAnySource ? recv_any_seq_[tag]++
                                                              : recv_seq_[{peer, tag}]++;
    fingerprint.seq = seq;
    p2p->seq = seq;
    ++op_counts_[fingerprint.op % kOpTypes];
    QueuedOp op;
    op.work = std::move(work);
    op.fingerprint = fingerprint;
    op.p2p = std::move(p2p);
    // At a ThenWork step's place when the step posts it, as collectives.
    PushLocked(std::move(op));
    wake_batch = p2p_running_;
    wake_worker = worker_sleeping_;
  }
  if (wake_batch) {
    const uint64_t one = 1;
    (void)::write(wake_.get(), &one, sizeof(one));  // The running batch takes it.
  }
  if (wake_worker) work_cv_.notify_one();
}

void OpQueue::TakePointToPoint(std::deque<QueuedOp>* into) {
  uint64_t drained;
  (void)::read(wake_.get(), &drained, sizeof(drained));  // Re-arms the wake-up.
  std::lock_guard<std::mutex> lock(mu_);
  // Point-to-point operations only: a ThenWork step queued behind them
  // runs after the batch, as a step.
  while (!queue_.empty() && queue_.front().p2p) into->push_back(queue_.pop_front());
  queue_size_.store(queue_.size(), std::memory_order_release);
}

void OpQueue::SetPointToPointRunning(bool running) {
  std::lock_guard<std::mutex> lock(mu_);
  p2p_running_ = running;
}

void OpQueue::WorkerLoop() {
  const auto spin = std::chrono::microseconds(worker_spin_microseconds_);
  while (true) {
    QueuedOp op;
    absl::Status broken;
    {
      // The next operation often follows within microseconds (a training
      // step's buckets, a benchmark loop): look for it, yielding the core to
      // the caller's thread, before sleeping, because a thread woken from a
      // futex on these VMs can take tens of microseconds. While a waiting
      // caller runs the operations itself (HelpUntilDone), keep looking
      // rather than sleep: each operation would otherwise cost a futex wake
      // on the caller's path and a context switch on its core. Any new
      // operation restarts the window.
      uint64_t seen = enqueued_.load(std::memory_order_relaxed);
      Deadline spin_until = SteadyClock::now() + spin;
      std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
      while (true) {
        bool spinning = true;
        while (!stopping_flag_.load(std::memory_order_acquire)) {
          if (queue_size_.load(std::memory_order_acquire) != 0 && !helping_.load(std::memory_order_acquire)) break;
          const Deadline now = SteadyClock::now();
          const uint64_t enqueued = enqueued_.load(std::memory_order_relaxed);
          if (enqueued != seen) {
            seen = enqueued;
            spin_until = now + spin;
          } else if (now >= spin_until) {
            spinning = false;
            break;
          }
          sched_yield();
        }
        lock.lock();
        // A caller took the operation meanwhile: keep looking while in the
        // window rather than sleep.
        if (!spinning || stopping_ || (!running_ && !queue_.empty())) break;
        lock.unlock();
      }
      // One runner at a time: a waiting caller may be running operations.
      worker_sleeping_ = true;
      work_cv_.wait(lock, [&] { return !running_ && (stopping_ || !queue_.empty()); });
      worker_sleeping_ = false;
      if (queue_.empty()) return;  // Stopping, and everything queued ran.
      op = TakeFrontLocked(&broken);
    }
    RunTaken(op, broken);
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
    // Nobody else waits on work_cv_: no notification.
  }
}

void OpQueue::HelpUntilDone(Work* awaited) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!running_ && !queue_.empty() && !awaited->IsCompleted()) {
    {
      absl::Status broken;
      QueuedOp op = TakeFrontLocked(&broken);
      helping_.store(true, std::memory_order_release);
      lock.unlock();
      RunTaken(op, broken);
    }  // The operation (its tensors, its task's captures) is released outside the lock.
    lock.lock();
    running_ = false;
    helping_.store(false, std::memory_order_release);
  }
  // The worker sleeps only when it has nothing to run: wake it only if it
  // now has (operations queued behind ours, or the queue stops).
  const bool wake = worker_sleeping_ && (stopping_ || !queue_.empty());
  lock.unlock();
  if (wake) work_cv_.notify_all();
}

QueuedOp OpQueue::TakeFrontLocked(absl::Status* broken) {
  QueuedOp op = queue_.pop_front();
  queue_size_.store(queue_.size(), std::memory_order_release);
  running_ = true;
  *broken = broken_;
  if (op.continuation) {
    // A ThenWork step: the operations it starts run next, in its order.
    step_thread_ = std::this_thread::get_id();
    step_queued_ = 0;
  } else if (broken->ok() && op.task) {
    // Collectives are numbered in the order they run.
    op.fingerprint.seq = next_seq_++;
    ++op_counts_[op.fingerprint.op % kOpTypes];
  }
  return op;
}

void OpQueue::RunTaken(QueuedOp& op, const absl::Status& broken) {
  if (op.continuation) {
    (*op.continuation)();
    std::lock_guard<std::mutex> lock(mu_);
    step_thread_ = std::thread::id();
    return;
  }
  if (!broken.ok()) {
    // Outside the lock: the Work's callbacks may start more operations.
    if (op.task != nullptr) op.task->ReleaseTask();
    op.work->Complete(broken);
    return;
  }
  runner_->Run(op);
}

void OpQueue::Defer(QueuedOp op, std::function<absl::Status()> finish) {
  std::lock_guard<std::mutex> lock(finish_mu_);
  if (!finisher_.joinable()) finisher_ = std::thread([this] { FinisherLoop(); });
  to_finish_.push_back(Deferred{std::move(op), std::move(finish)});
  finish_cv_.notify_one();
}

void OpQueue::FinisherLoop() {
  while (true) {
    Deferred d;
    {
      std::unique_lock<std::mutex> lock(finish_mu_);
      finish_cv_.wait(lock, [&] { return finisher_stop_ || !to_finish_.empty(); });
      if (to_finish_.empty()) return;  // Stopping, and everything deferred finished.
      d = std::move(to_finish_.front());
      to_finish_.pop_front();
    }
    absl::Status status = d.finish();
    runner_->Finished(d.op, std::move(status));
  }
}

}  // namespace communicator_internal
}  // namespace lockstep
