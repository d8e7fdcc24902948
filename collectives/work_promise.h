// WorkPromise: a Work of one's own, completed once by its maker. For code
// outside the collectives packages that must hand back a Work: a custom
// DDP comm hook whose result comes from more than one collective, or from a
// thread of its own.
//
//   WorkPromise promise;
//   std::shared_ptr<Work> work = promise.work();  // hand this out
//   ...
//   promise.Complete(absl::OkStatus());  // later, on any thread: work->Wait() returns OK
//
// Complete takes effect once; later calls are ignored. A promise destroyed
// before it completed completes its Work with Cancelled, so no waiter hangs.
// Only the promise can complete its Work: a Work from a communicator is
// never a promise's.
#ifndef LOCKSTEP_COLLECTIVES_WORK_PROMISE_H_
#define LOCKSTEP_COLLECTIVES_WORK_PROMISE_H_

#include <memory>

#include "absl/status/status.h"
#include "collectives/work.h"

namespace lockstep {

class WorkPromise {
 public:
  WorkPromise();
  ~WorkPromise();
  WorkPromise(WorkPromise&&) = default;
  WorkPromise& operator=(WorkPromise&&) = delete;
  WorkPromise(const WorkPromise&) = delete;
  WorkPromise& operator=(const WorkPromise&) = delete;

  std::shared_ptr<Work> work() const;
  void Complete(absl::Status status);

  // A Work already completed with `status` (a comm hook's error before any
  // collective started, or its result when nothing needs sending).
  static std::shared_ptr<Work> Completed(absl::Status status);

 private:
  class PromisedWork;
  std::shared_ptr<PromisedWork> work_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_WORK_PROMISE_H_
