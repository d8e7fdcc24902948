#include "collectives/nccl/nccl_watchdog.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace lockstep {

NcclWatchdog::NcclWatchdog(Hooks hooks, std::chrono::milliseconds interval, std::string where)
    : hooks_(std::move(hooks)), interval_(interval), where_(std::move(where)) {
  thread_ = std::thread([this] { Loop(); });
}

NcclWatchdog::~NcclWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

uint64_t NcclWatchdog::Begin(std::string fingerprint, Deadline deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  in_flight_.emplace(id, Op{std::move(fingerprint), deadline});
  return id;
}

void NcclWatchdog::End(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_.erase(id);
}

absl::Status NcclWatchdog::status() {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void NcclWatchdog::Fail(absl::Status error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!status_.ok()) return;
    status_ = error;
    failed_.store(true, std::memory_order_release);
  }
  // Outside the lock: ncclCommAbort can take a while, and operations polling
  // status() must see the failure meanwhile.
  if (hooks_.abort) hooks_.abort(error);
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
  }
  aborted_cv_.notify_all();
}

void NcclWatchdog::AwaitAbort(Deadline give_up) {
  std::unique_lock<std::mutex> lock(mu_);
  aborted_cv_.wait_until(lock, give_up, [&] { return aborted_; });
}

absl::Status NcclWatchdog::Check() {
  // Called with mu_ held. The async error first: it names the real cause,
  // where a deadline only says that something is stuck.
  std::string in_flight;
  for (const auto& [id, op] : in_flight_) absl::StrAppend(&in_flight, in_flight.empty() ? "" : "; ", op.fingerprint);
  if (in_flight.empty()) in_flight = "no operation";
  if (hooks_.async_error) {
    absl::Status async = hooks_.async_error();
    if (!async.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "NCCL on ", where_, " reported an asynchronous error while running ", in_flight, ": ", async.message(),
          "; the watchdog aborted the NCCL communicator. A peer rank probably died or lost its network: check "
          "the other ranks' logs, then create a new communicator"));
    }
  }
  const Deadline now = SteadyClock::now();
  for (const auto& [id, op] : in_flight_) {
    if (op.deadline != kNoDeadline && now >= op.deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "NCCL ", op.fingerprint, " on ", where_,
          " did not finish by its deadline (CommunicatorOptions.timeout); the watchdog aborted the NCCL "
          "communicator. A rank died, is stuck, or issued a different sequence of collectives: check the other "
          "ranks, rerun with LOCKSTEP_DEBUG=DETAIL to compare fingerprints, or raise the timeout"));
    }
  }
  return absl::OkStatus();
}

bool NcclWatchdog::AwaitRound(Deadline not_before, Deadline give_up) {
  std::unique_lock<std::mutex> lock(mu_);
  return round_cv_.wait_until(lock, give_up, [&] { return rounds_ > 0 && last_round_began_ >= not_before; });
}

uint64_t NcclWatchdog::rounds() {
  std::lock_guard<std::mutex> lock(mu_);
  return rounds_;
}

void NcclWatchdog::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, interval_, [this] { return stop_; });
    if (stop_) break;
    const Deadline began = SteadyClock::now();
    if (status_.ok()) {
      absl::Status problem = Check();
      if (!problem.ok()) {
        lock.unlock();
        Fail(std::move(problem));
        lock.lock();
      }
    }
    ++rounds_;
    last_round_began_ = began;
    round_cv_.notify_all();
  }
}

}  // namespace lockstep
