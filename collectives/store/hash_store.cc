#include "collectives/store/hash_store.h"

#include "collectives/store/store_ops.h"
#include "core/deadline.h"

namespace lockstep {
namespace {

// A saturated deadline: a huge timeout (Milliseconds::max()) waits for
// good instead of overflowing into an immediate timeout.
template <typename Predicate>
bool WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, Deadline deadline, Predicate ready) {
  if (deadline == kNoDeadline) {
    cv.wait(lock, ready);
    return true;
  }
  return cv.wait_until(lock, deadline, ready);
}

}  // namespace

absl::Status HashStore::Set(absl::string_view key, absl::string_view value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[std::string(key)] = std::string(value);
  }
  changed_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<std::string> HashStore::Get(absl::string_view key, Milliseconds timeout) {
  std::vector<std::string> keys = {std::string(key)};
  std::unique_lock<std::mutex> lock(mu_);
  if (!WaitForKeys(lock, keys, timeout)) return store_ops::WaitTimeout(data_, keys, timeout);
  return data_.find(key)->second;
}

absl::StatusOr<int64_t> HashStore::Add(absl::string_view key, int64_t delta) {
  absl::StatusOr<int64_t> result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    result = store_ops::Add(data_, key, delta);
  }
  changed_.notify_all();
  return result;
}

absl::StatusOr<std::string> HashStore::CompareSet(absl::string_view key, absl::string_view expected,
                                                  absl::string_view desired) {
  std::string result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    result = store_ops::CompareSet(data_, key, expected, desired);
  }
  changed_.notify_all();
  return result;
}

absl::Status HashStore::Wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!WaitForKeys(lock, keys, timeout)) return store_ops::WaitTimeout(data_, keys, timeout);
  return absl::OkStatus();
}

bool HashStore::WaitForKeys(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                            Milliseconds timeout) {
  ++waiters_;
  const bool present =
      WaitUntil(changed_, lock, DeadlineIn(timeout), [&] { return store_ops::AllPresent(data_, keys); });
  --waiters_;
  return present;
}

int HashStore::NumWaitersForTesting() {
  std::lock_guard<std::mutex> lock(mu_);
  return waiters_;
}

absl::StatusOr<bool> HashStore::Check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  return store_ops::AllPresent(data_, keys);
}

absl::StatusOr<bool> HashStore::DeleteKey(absl::string_view key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = data_.find(key);
  if (it == data_.end()) return false;
  data_.erase(it);
  return true;
}

absl::StatusOr<int64_t> HashStore::NumKeys() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(data_.size());
}

}  // namespace lockstep
