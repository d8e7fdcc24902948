// TaskWork: a queued collective's Work and its task in one allocation.
// Internal to the Communicator (collectives/internal/op_queue.h).
//
// A task captures its tensors (a Tensor is 64 bytes), so as a std::function
// it took a heap allocation of its own besides the Work's; here the task
// lives inside the Work, which is allocated anyway. The Communicator
// releases the task (its captures) as soon as the operation has finished,
// so a Work the caller keeps does not keep the tensors alive.
#ifndef LOCKSTEP_COLLECTIVES_INTERNAL_TASK_WORK_H_
#define LOCKSTEP_COLLECTIVES_INTERNAL_TASK_WORK_H_

#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "collectives/backend.h"
#include "collectives/completable_work.h"

namespace lockstep {
namespace communicator_internal {

class TaskWork : public CompletableWork {
 public:
  explicit TaskWork(int spin_microseconds) : CompletableWork(spin_microseconds) {}
  // Runs the task; only before ReleaseTask.
  virtual absl::Status RunTask(const OpContext& op_ctx) = 0;
  // Destroys the task and what it captured (once the operation finished).
  virtual void ReleaseTask() = 0;
};

template <typename F>
class TaskWorkOf final : public TaskWork {
 public:
  // The task is moved once, into place.
  template <typename G>
  TaskWorkOf(int spin_microseconds, G&& task)
      : TaskWork(spin_microseconds), task_(std::in_place, std::forward<G>(task)) {}
  absl::Status RunTask(const OpContext& op_ctx) override { return (*task_)(op_ctx); }
  void ReleaseTask() override { task_.reset(); }

 private:
  std::optional<F> task_;
};

}  // namespace communicator_internal
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_INTERNAL_TASK_WORK_H_
