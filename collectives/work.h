// Work: the handle of one asynchronous collective operation, as c10d's Work.
//
//   std::shared_ptr<Work> work = comm->AllReduce(grads, ReduceOp::kSum);
//   ...                              // overlap other work
//   LOCKSTEP_RETURN_IF_ERROR(work->Wait());
//
// Contract:
//   * Wait(timeout) blocks until the operation finished or `timeout` passed.
//     It returns the operation's final status, or DeadlineExceeded if it is
//     still running (the operation itself goes on and will finish or fail
//     by its own deadline, the communicator's timeout). Wait() without a
//     timeout waits for that final status, so it cannot hang forever.
//   * IsCompleted() never blocks. status() is the final status once
//     IsCompleted() is true.
//   * Output tensors must not be read or written until the work completed.
#ifndef LOCKSTEP_COLLECTIVES_WORK_H_
#define LOCKSTEP_COLLECTIVES_WORK_H_

#include <chrono>
#include <atomic>
#include <condition_variable>
#include <mutex>

#include "absl/status/status.h"

namespace lockstep {

class Work {
 public:
  // `spin_microseconds`: how long Wait() checks for completion, yielding the
  // core between checks, before it sleeps (0: sleep at once).
  explicit Work(int spin_microseconds = 0) : spin_microseconds_(spin_microseconds) {}

  absl::Status Wait();
  absl::Status Wait(std::chrono::milliseconds timeout);
  bool IsCompleted();
  absl::Status status();

  // For the communicator: records the final status and wakes waiters.
  void Complete(absl::Status status);

 private:
  // Wait() never busy-spins: it yields between checks, so a worker thread
  // sharing the waiter's core runs first (a plain spin made small
  // all-reduces 3-4x slower on 2 cores), and then sleeps.
  void SpinUntilDone(std::chrono::microseconds limit);

  const int spin_microseconds_;
  std::mutex mu_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::atomic<bool> done_flag_{false};
  absl::Status status_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_WORK_H_
