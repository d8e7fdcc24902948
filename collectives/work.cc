#include "collectives/work.h"

#include <sched.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/completable_work.h"

namespace lockstep {

void Work::SpinUntilDone(std::chrono::microseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done_flag_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
    sched_yield();
  }
}

absl::Status Work::Wait() {
  if (helper_ != nullptr && !IsCompleted()) (*helper_)(this);
  // status_ no longer changes once the flag is set (Complete stores it
  // first): the common case of a helped operation takes no lock.
  if (IsCompleted()) return status_;
  SpinUntilDone(std::chrono::microseconds(spin_microseconds_));
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return done_; });
  return status_;
}

absl::Status Work::Wait(std::chrono::milliseconds timeout) {
  SpinUntilDone(std::min<std::chrono::microseconds>(std::chrono::microseconds(spin_microseconds_), timeout));
  std::unique_lock<std::mutex> lock(mu_);
  if (!done_cv_.wait_for(lock, timeout, [&] { return done_; })) {
    return absl::DeadlineExceededError(
        absl::StrCat("Work::Wait: the operation did not finish within ", timeout.count(),
                     " ms; it is still running and ends by the communicator's own timeout"));
  }
  return status_;
}

bool Work::IsCompleted() { return done_flag_.load(std::memory_order_acquire); }

absl::Status Work::status() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ ? status_ : absl::UnavailableError("Work::status: not completed yet");
}

absl::Status Work::SynchronizeStream(void* stream) {
  std::shared_ptr<StreamMarker> marker;
  {
    // No helper here: a helping caller would run the operation itself and
    // poll the device until it finished, which is what this avoids. The
    // communicator's own thread queues it. The wait is bounded: the
    // operation is queued, or fails, by the communicator's deadline.
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return done_ || marker_ != nullptr; });
    if (done_) return status_;
    marker = marker_;
  }
  return marker->MakeStreamWait(stream);
}

void Work::SetStreamMarker(std::shared_ptr<StreamMarker> marker) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (completing_) return;
    marker_ = std::move(marker);
  }
  done_cv_.notify_all();
}

void Work::OnComplete(std::function<void(const absl::Status&)> callback) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!completing_) {
      callbacks_.push_back(std::move(callback));
      return;
    }
  }
  callback(status_);  // status_ no longer changes once completing_.
}

std::shared_ptr<Work> Work::Then(std::function<absl::Status()> fn) {
  auto chained = CompletableWork::Create(spin_microseconds_);
  chained->helper_ = helper_;
  OnComplete([chained, fn = std::move(fn)](const absl::Status& status) mutable {
    absl::Status result = status;
    if (status.ok()) {
      // fn, with what it captured, is gone before the chained Work's
      // waiters wake (the contract above).
      std::function<absl::Status()> run = std::move(fn);
      result = run();
    }
    chained->Complete(std::move(result));
  });
  return chained;
}

std::shared_ptr<Work> Work::ThenWork(std::function<absl::StatusOr<std::shared_ptr<Work>>()> fn) {
  auto chained = CompletableWork::Create(spin_microseconds_);
  chained->helper_ = helper_;
  chained->sequencer_ = sequencer_;
  // Shared by the sequenced step and the callback, whichever runs it; fn
  // (and what it captured) is released once it ran.
  auto pending = std::make_shared<std::function<absl::StatusOr<std::shared_ptr<Work>>()>>(std::move(fn));
  auto proceed = [chained, pending](const absl::Status& status) {
    std::function<absl::StatusOr<std::shared_ptr<Work>>()> run = std::move(*pending);
    *pending = nullptr;
    if (!status.ok()) return chained->Complete(status);
    absl::StatusOr<std::shared_ptr<Work>> next = run();
    run = nullptr;
    if (!next.ok()) return chained->Complete(next.status());
    if (*next == nullptr) {
      return chained->Complete(absl::InternalError("Work::ThenWork: the continuation returned no Work"));
    }
    (*next)->OnComplete([chained](const absl::Status& s) { chained->Complete(s); });
  };
  if (sequencer_ != nullptr) {
    // A step of the queue, after this work's operation (queued before it):
    // a host operation has completed by then.
    std::shared_ptr<Work> self = shared_from_this();
    const bool queued = (*sequencer_)([self, proceed]() {
      if (self->IsCompleted()) {
        proceed(self->status_);  // status_ no longer changes once done.
      } else {
        self->OnComplete(proceed);  // Still on a device: when it ends.
      }
    });
    if (queued) return chained;
  }
  OnComplete(std::move(proceed));
  return chained;
}

void Work::Complete(absl::Status status) {
  std::vector<std::function<void(const absl::Status&)>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (completing_) return;
    status_ = std::move(status);
    completing_ = true;
    marker_.reset();  // The event has fired (or failed); release it.
    if (callbacks_.empty()) {
      // The common case (an operation waited on): done in one critical
      // section.
      done_ = true;
      done_flag_.store(true, std::memory_order_release);
    } else {
      callbacks.swap(callbacks_);
    }
  }
  // A callback may hold the last reference to this work (a bridge that
  // owns it, owned by the callback): kept alive until the end.
  std::shared_ptr<Work> keep;
  if (!callbacks.empty()) {
    keep = weak_from_this().lock();
    // Outside the lock: a callback may chain on this work (it then runs at
    // once). The callbacks are destroyed before waiters wake, so what they
    // hold (a bridge's tensors, which may need Python's lock to free) is
    // never freed on this thread after the waiter went on.
    for (auto& callback : callbacks) callback(status_);
    callbacks.clear();
    callbacks.shrink_to_fit();
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    done_flag_.store(true, std::memory_order_release);
  }
  done_cv_.notify_all();
}

}  // namespace lockstep
