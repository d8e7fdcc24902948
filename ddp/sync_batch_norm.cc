#include "ddp/sync_batch_norm.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "nn/batch_norm.h"

namespace lockstep {
namespace {

// Sums over the communicator's group: one blocking f64 all-reduce.
class CommunicatorSync final : public BatchNormSync {
 public:
  explicit CommunicatorSync(Communicator& comm) : comm_(comm) {}

  absl::Status AllSum(std::vector<double>& values) override {
    if (comm_.size() == 1 || values.empty()) return absl::OkStatus();
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::FromVector<double>(values));
    absl::Status s = comm_.AllReduce(t, ReduceOp::kSum)->Wait();
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("SyncBatchNorm all-reduce of ", values.size(), " values on rank ",
                                                 comm_.rank(), " of ", comm_.size(), ": ", s.message()));
    }
    const double* sum = t.data<double>();
    values.assign(sum, sum + values.size());
    return absl::OkStatus();
  }

 private:
  Communicator& comm_;
};

}  // namespace

absl::StatusOr<int> ConvertSyncBatchNorm(Module& module, Communicator& comm) {
  auto sync = std::make_shared<CommunicatorSync>(comm);
  int converted = 0;
  for (auto& [path, m] : module.NamedModules()) {
    if (auto* bn = dynamic_cast<BatchNorm*>(m)) {
      bn->SetSync(sync);
      ++converted;
    }
  }
  return converted;
}

int RevertSyncBatchNorm(Module& module) {
  int reverted = 0;
  for (auto& [path, m] : module.NamedModules()) {
    if (auto* bn = dynamic_cast<BatchNorm*>(m); bn != nullptr && bn->synchronized()) {
      bn->SetSync(nullptr);
      ++reverted;
    }
  }
  return reverted;
}

}  // namespace lockstep
