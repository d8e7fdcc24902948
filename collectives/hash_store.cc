#include "collectives/hash_store.h"

#include "collectives/store_ops.h"

namespace lockstep {

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
  if (!changed_.wait_for(lock, timeout, [&] { return store_ops::AllPresent(data_, keys); })) {
    return store_ops::WaitTimeout(data_, keys, timeout);
  }
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
  if (!changed_.wait_for(lock, timeout, [&] { return store_ops::AllPresent(data_, keys); })) {
    return store_ops::WaitTimeout(data_, keys, timeout);
  }
  return absl::OkStatus();
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
