#include "collectives/work.h"

#include <sched.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace lockstep {

void Work::SpinUntilDone(std::chrono::microseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done_flag_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
    sched_yield();
  }
}

absl::Status Work::Wait() {
  SpinUntilDone(std::chrono::microseconds(spin_microseconds_));
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return done_; });
  return status_;
}

absl::Status Work::Wait(std::chrono::milliseconds timeout) {
  SpinUntilDone(std::min<std::chrono::microseconds>(std::chrono::microseconds(spin_microseconds_), timeout));
  std::unique_lock<std::mutex> lock(mu_);
  if (!done_cv_.wait_for(lock, timeout, [&] { return done_; })) {
    return absl::DeadlineExceededError(absl::StrCat(
        "Work::Wait: the operation did not finish within ", timeout.count(),
        " ms; it is still running and ends by the communicator's own timeout"));
  }
  return status_;
}

bool Work::IsCompleted() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

absl::Status Work::status() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ ? status_ : absl::UnavailableError("Work::status: not completed yet");
}

void Work::Complete(absl::Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = std::move(status);
    done_ = true;
    done_flag_.store(true, std::memory_order_release);
  }
  done_cv_.notify_all();
}

}  // namespace lockstep
