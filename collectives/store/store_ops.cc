#include "collectives/store/store_ops.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lockstep {
namespace store_ops {
namespace {

template <typename M>
absl::StatusOr<int64_t> AddTo(M& data, absl::string_view key, int64_t delta) {
  int64_t value = 0;
  auto it = data.find(key);
  if (it != data.end() && !absl::SimpleAtoi(it->second, &value)) {
    return absl::FailedPreconditionError(absl::StrCat("Store::Add('", key, "'): the key holds '",
                                                      it->second.substr(0, 64),
                                                      "', not an integer; use a separate key for counters"));
  }
  // Wrap like the int64 arithmetic of c10d's server would, without UB.
  value = static_cast<int64_t>(static_cast<uint64_t>(value) + static_cast<uint64_t>(delta));
  data[std::string(key)] = absl::StrCat(value);
  return value;
}

template <typename M>
std::string CompareSetIn(M& data, absl::string_view key, absl::string_view expected, absl::string_view desired) {
  auto it = data.find(key);
  if (it == data.end()) {
    if (expected.empty()) {
      data.emplace(std::string(key), std::string(desired));
      return std::string(desired);
    }
    return std::string(expected);
  }
  if (it->second == expected) it->second = std::string(desired);
  return it->second;
}

template <typename M>
bool AllPresentIn(const M& data, const std::vector<std::string>& keys) {
  for (const std::string& k : keys) {
    if (data.find(k) == data.end()) return false;
  }
  return true;
}

template <typename M>
absl::Status WaitTimeoutIn(const M& data, const std::vector<std::string>& keys, Milliseconds timeout) {
  std::vector<std::string> missing;
  for (const std::string& k : keys) {
    if (data.find(k) == data.end()) missing.push_back(k);
  }
  return absl::DeadlineExceededError(
      absl::StrCat("Store: timed out after ", timeout.count(), " ms waiting for key(s) ", absl::StrJoin(missing, ", "),
                   "; a process that should set them has not (started late, crashed, or uses another "
                   "prefix/run id). Raise the timeout or check that process's log"));
}

}  // namespace

absl::StatusOr<int64_t> Add(Map& data, absl::string_view key, int64_t delta) { return AddTo(data, key, delta); }
absl::StatusOr<int64_t> Add(HashMap& data, absl::string_view key, int64_t delta) { return AddTo(data, key, delta); }
std::string CompareSet(Map& data, absl::string_view key, absl::string_view expected, absl::string_view desired) {
  return CompareSetIn(data, key, expected, desired);
}
std::string CompareSet(HashMap& data, absl::string_view key, absl::string_view expected, absl::string_view desired) {
  return CompareSetIn(data, key, expected, desired);
}
bool AllPresent(const Map& data, const std::vector<std::string>& keys) { return AllPresentIn(data, keys); }
bool AllPresent(const HashMap& data, const std::vector<std::string>& keys) { return AllPresentIn(data, keys); }
absl::Status WaitTimeout(const Map& data, const std::vector<std::string>& keys, Milliseconds timeout) {
  return WaitTimeoutIn(data, keys, timeout);
}
absl::Status WaitTimeout(const HashMap& data, const std::vector<std::string>& keys, Milliseconds timeout) {
  return WaitTimeoutIn(data, keys, timeout);
}

}  // namespace store_ops
}  // namespace lockstep
