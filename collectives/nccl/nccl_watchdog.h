// NcclWatchdog: a thread that watches the NCCL operations in flight, as
// PyTorch's ProcessGroupNCCL watchdog does. NCCL never times out on its own:
// a collective whose peer died spins on the GPU forever. Every `interval`
// the watchdog
//   * asks NCCL for an asynchronous error (a peer left, a network failure),
//   * compares each operation in flight with its deadline,
// and on the first problem records an error naming the operation (its
// fingerprint: sequence number, op, dtype, count), the rank and device, then
// calls `abort` once (ncclCommAbort), which makes the operation's stream
// and any NCCL call blocked on it return. Every operation in flight and
// every later one then fails with that error.
//
//   NcclWatchdog dog({[&] { return comm->AsyncError(); }, [&](const absl::Status&) { comm->Abort(); }},
//                    std::chrono::milliseconds(100), "rank 1 on cuda:1");
//   uint64_t id = dog.Begin("AllReduce seq 7 (f32, 1000 elements, sum)", op_ctx.deadline);
//   ... poll the op's event, returning dog.status() if it is not OK ...
//   dog.End(id);
//
// Uses std::mutex (not absl::Mutex) so that TSan checks it.
#ifndef LOCKSTEP_COLLECTIVES_NCCL_NCCL_WATCHDOG_H_
#define LOCKSTEP_COLLECTIVES_NCCL_NCCL_WATCHDOG_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "core/deadline.h"

namespace lockstep {

class NcclWatchdog {
 public:
  struct Hooks {
    // Polled every interval from the watchdog's thread; OK while healthy.
    std::function<absl::Status()> async_error;
    // Called once, from the watchdog's thread (or from Fail's caller), with
    // the error that failed the group.
    std::function<void(const absl::Status&)> abort;
  };

  // `where`: "rank 1 on cuda:1", for messages. Starts the thread.
  NcclWatchdog(Hooks hooks, std::chrono::milliseconds interval, std::string where);
  ~NcclWatchdog();  // Stops the thread (does not abort).
  NcclWatchdog(const NcclWatchdog&) = delete;
  NcclWatchdog& operator=(const NcclWatchdog&) = delete;

  // Registers an operation in flight; `fingerprint` describes it.
  uint64_t Begin(std::string fingerprint, Deadline deadline);
  // The operation finished (successfully or not).
  void End(uint64_t id);

  // OK until the first failure, then that failure (forever).
  absl::Status status();
  bool failed() const { return failed_.load(std::memory_order_acquire); }

  // Records `error` as the failure (unless one is recorded) and aborts.
  void Fail(absl::Status error);
  // Blocks until the abort that followed the failure has returned (or
  // `give_up`): an operation that reports "the watchdog aborted the NCCL
  // communicator" says so only once it is true.
  void AwaitAbort(Deadline give_up);

  // Blocks until a round of the watchdog that began at or after
  // `not_before` has finished (its checks done, or skipped once failed), or
  // until `give_up`; true if such a round finished. For tests and tools
  // that must know the watchdog has looked, instead of sleeping.
  bool AwaitRound(Deadline not_before, Deadline give_up);
  // Rounds finished so far.
  uint64_t rounds();

 private:
  struct Op {
    std::string fingerprint;
    Deadline deadline;
  };
  void Loop();
  // Finds the first problem with the operations in flight; OK if none.
  absl::Status Check();

  const Hooks hooks_;
  const std::chrono::milliseconds interval_;
  const std::string where_;

  std::mutex mu_;  // Guards everything below.
  std::condition_variable cv_;
  std::condition_variable round_cv_;  // notified after each round
  uint64_t rounds_ = 0;
  Deadline last_round_began_{};
  bool stop_ = false;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Op> in_flight_;
  absl::Status status_;
  bool aborted_ = false;  // The abort hook returned.
  std::condition_variable aborted_cv_;
  std::atomic<bool> failed_{false};
  std::thread thread_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_NCCL_NCCL_WATCHDOG_H_
