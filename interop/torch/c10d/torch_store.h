// TorchStore: PyTorch's c10d::Store (TCPStore, FileStore, HashStore,
// PrefixStore: whatever init_process_group made) seen as lockstep's Store,
// so that a lockstep group can meet through the store PyTorch hands a
// torch.distributed backend.
//
//   c10::intrusive_ptr<c10d::Store> theirs = ...;  // the backend creator's argument
//   auto store = std::make_shared<TorchStore>(theirs);
//   LOCKSTEP_ASSIGN_OR_RETURN(std::string v, store->Get("key", std::chrono::seconds(30)));
//
// Every call goes to the c10d store as it is; what it throws (c10::Error,
// c10d's TimeoutError, std::exception) comes back as a Status naming the
// operation and key: DeadlineExceeded for a timeout, Unimplemented where
// that store lacks the call (1.13's HashStore has no compareSet), else
// Unavailable. Nothing throws across this API. Thread-safe as the c10d
// store is (all of PyTorch's are).
#ifndef LOCKSTEP_INTEROP_TORCH_C10D_TORCH_STORE_H_
#define LOCKSTEP_INTEROP_TORCH_C10D_TORCH_STORE_H_

#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "collectives/store/store.h"

namespace lockstep {

class TorchStore final : public Store {
 public:
  explicit TorchStore(c10::intrusive_ptr<::c10d::Store> store);

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, Milliseconds timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override;
  absl::Status Wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys) override;
  absl::StatusOr<bool> DeleteKey(absl::string_view key) override;
  absl::StatusOr<int64_t> NumKeys() override;

  const c10::intrusive_ptr<::c10d::Store>& torch_store() const { return store_; }

 private:
  c10::intrusive_ptr<::c10d::Store> store_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_INTEROP_TORCH_C10D_TORCH_STORE_H_
