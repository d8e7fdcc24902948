// CompletableWork: the side of a Work that backends hold. Visible only to
// the packages that run operations (collectives, ddp): a user's Work can be
// waited on and chained, never completed from outside.
#ifndef LOCKSTEP_COLLECTIVES_COMPLETABLE_WORK_H_
#define LOCKSTEP_COLLECTIVES_COMPLETABLE_WORK_H_

#include <memory>

#include "absl/status/status.h"
#include "collectives/work.h"

namespace lockstep {

class CompletableWork : public Work {
 public:
  explicit CompletableWork(int spin_microseconds = 0) : Work(spin_microseconds) {}

  static std::shared_ptr<CompletableWork> Create(int spin_microseconds = 0) {
    return std::make_shared<CompletableWork>(spin_microseconds);
  }
  // A Work that is already complete (errors found before anything ran).
  static std::shared_ptr<Work> Done(absl::Status status, int spin_microseconds = 0) {
    auto work = Create(spin_microseconds);
    work->Complete(std::move(status));
    return work;
  }

  using Work::Complete;
  using Work::SetHelper;
  using Work::SetSequencer;
  using Work::SetSourceRank;
  using Work::SetStreamMarker;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_COMPLETABLE_WORK_H_
