// CommunicatorState: what a Communicator holds (communicator.h keeps only a
// pointer to it) and how it runs an operation the queue hands it. Internal to
// //collectives:communicator; the operation files (communicator_*.cc) build
// on it:
//
//   // In Communicator::Barrier():
//   CommunicatorState& s = *state_;
//   return s.Enqueue(fingerprint, [b = s.backend.get()](const OpContext& ctx) { return b->Barrier(ctx); });
#ifndef LOCKSTEP_COLLECTIVES_COMMUNICATOR_STATE_H_
#define LOCKSTEP_COLLECTIVES_COMMUNICATOR_STATE_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collectives/backend.h"
#include "collectives/communicator.h"
#include "collectives/flight_recorder.h"
#include "collectives/internal/fingerprint.h"
#include "collectives/internal/op_queue.h"
#include "collectives/internal/task_work.h"
#include "collectives/store/store.h"
#include "core/dtype.h"
#include "core/reduce_op.h"
#include "core/tensor.h"

namespace lockstep {
namespace communicator_internal {

class CommunicatorState final : public OpRunner {
 public:
  CommunicatorState(std::unique_ptr<Backend> backend, CommunicatorOptions options, std::shared_ptr<Store> store);

  // A failed Work for errors found when called (nothing queued).
  std::shared_ptr<Work> Failed(absl::Status status) const;
  // Queues a collective: `task`, called as absl::Status(const OpContext&),
  // runs the backend's operation when the queue reaches it.
  template <typename F>
  std::shared_ptr<Work> Enqueue(const Fingerprint& fingerprint, F&& task);

  // Argument checks shared by the operation files: OK, or InvalidArgument
  // naming `op`.
  absl::Status CheckDevice(const Tensor& t, const char* op, const char* what) const;
  absl::Status CheckReduceOp(ReduceOp reduce_op, DType dtype, const char* op) const;
  absl::Status CheckCounts(absl::Span<const int64_t> counts, const char* op, const char* what) const;

  // The error of `fingerprint`'s operation; breaks the group unless broken.
  absl::Status Fail(const Fingerprint& fingerprint, const absl::Status& status);
  // Records a failure: aborts the backend (peers blocked on this rank fail
  // now, not at their deadline), shares the cause, breaks the queue.
  absl::Status Break(const absl::Status& status);

  // OpRunner.
  void Run(QueuedOp& op) override;
  void Finished(QueuedOp& op, absl::Status status) override;

  const std::unique_ptr<Backend> backend;
  const std::shared_ptr<Store> store;  // Prefixed; may be null.
  const CommunicatorOptions options;
  FlightRecorder recorder;
  const int rank, size;
  // The backend's, asked once: checking every call's tensors against them
  // must not build a string per operation.
  const BackendCapabilities capabilities;
  const std::chrono::nanoseconds coarse_tick;  // CoarseResolution(): start times lag by up to this.
  Communicator::SubgroupFactory subgroup_factory;
  std::atomic<uint64_t> splits{0};  // Subgroups asked for so far (names them).
  // Last: destroyed first, its threads stopped while the above still exist.
  OpQueue queue;

 private:
  absl::Status CheckFingerprints(const Fingerprint& mine, const OpContext& op_ctx);
  // Runs point-to-point operations from `first` on, with those posted
  // meanwhile (communicator_p2p.cc).
  void RunPointToPointBatch(QueuedOp first);
};

template <typename F>
std::shared_ptr<Work> CommunicatorState::Enqueue(const Fingerprint& fingerprint, F&& task) {
  using Task = std::decay_t<F>;
  static_assert(std::is_invocable_r_v<absl::Status, Task&, const OpContext&>,
                "a task is called as absl::Status(const OpContext&)");
  auto work = std::make_shared<TaskWorkOf<Task>>(options.wait_spin_microseconds, std::forward<F>(task));
  queue.PushCollective(work, fingerprint);
  return work;
}

}  // namespace communicator_internal
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_COMMUNICATOR_STATE_H_
