// PrefixStore: a namespace inside another store ("<prefix>/<key>"), as
// c10d's PrefixStore; lets several groups or restarts share one server.
//
//   PrefixStore group(run_id + "/restart3", base);
#ifndef LOCKSTEP_COLLECTIVES_STORE_PREFIX_STORE_H_
#define LOCKSTEP_COLLECTIVES_STORE_PREFIX_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "collectives/store/store.h"

namespace lockstep {

class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, Milliseconds timeout) override;
  using Store::Get;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override;
  absl::Status Wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  absl::StatusOr<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys,
                                                    Milliseconds timeout) override;
  using Store::MultiGet;
  using Store::Wait;
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys) override;
  absl::StatusOr<bool> DeleteKey(absl::string_view key) override;
  // Keys in the whole underlying store (as c10d's PrefixStore).
  absl::StatusOr<int64_t> NumKeys() override;

 private:
  std::string Key(absl::string_view key) const;
  std::vector<std::string> Keys(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_STORE_PREFIX_STORE_H_
