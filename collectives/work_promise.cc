#include "collectives/work_promise.h"

#include <utility>

namespace lockstep {

// Its type is private to this file, so no Work handed out elsewhere can be
// cast to it and completed.
class WorkPromise::PromisedWork final : public Work {
 public:
  PromisedWork() : Work(/*spin_microseconds=*/0) {}
  using Work::Complete;
};

WorkPromise::WorkPromise() : work_(std::make_shared<PromisedWork>()) {}

WorkPromise::~WorkPromise() {
  if (work_ != nullptr) work_->Complete(absl::CancelledError("WorkPromise: destroyed before it completed its Work"));
}

std::shared_ptr<Work> WorkPromise::work() const { return work_; }

std::shared_ptr<Work> WorkPromise::Completed(absl::Status status) {
  WorkPromise promise;
  std::shared_ptr<Work> work = promise.work();
  promise.Complete(std::move(status));
  return work;
}

void WorkPromise::Complete(absl::Status status) {
  if (work_ != nullptr) work_->Complete(std::move(status));
}

}  // namespace lockstep
