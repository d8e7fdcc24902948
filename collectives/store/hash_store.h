// HashStore: an in-process Store (threads of one process rendezvous through
// it), as c10d's HashStore. Used by thread-per-rank tests.
#ifndef LOCKSTEP_COLLECTIVES_STORE_HASH_STORE_H_
#define LOCKSTEP_COLLECTIVES_STORE_HASH_STORE_H_

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/store/store.h"

namespace lockstep {

class HashStore : public Store {
 public:
  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, Milliseconds timeout) override;
  using Store::Get;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override;
  absl::Status Wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  using Store::Wait;
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys) override;
  absl::StatusOr<bool> DeleteKey(absl::string_view key) override;
  absl::StatusOr<int64_t> NumKeys() override;

  // Calls blocked in Get/Wait right now (tests synchronize on it).
  int NumWaitersForTesting();

 private:
  bool WaitForKeys(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys, Milliseconds timeout);

  int waiters_ = 0;  // Guarded by mu_.
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string, std::less<>> data_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_STORE_HASH_STORE_H_
