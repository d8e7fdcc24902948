#include "collectives/communicator_state.h"

#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/completable_work.h"
#include "collectives/internal/failure_report.h"
#include "core/deadline.h"
#include "core/status.h"

namespace lockstep {
namespace communicator_internal {

CommunicatorState::CommunicatorState(std::unique_ptr<Backend> backend_in, CommunicatorOptions options_in,
                                     std::shared_ptr<Store> store_in)
    : backend(std::move(backend_in)),
      store(std::move(store_in)),
      options(std::move(options_in)),
      recorder(static_cast<size_t>(options.flight_recorder_entries)),
      rank(backend->rank()),
      size(backend->size()),
      capabilities(backend->capabilities()),
      coarse_tick(CoarseResolution()),
      queue(this, options.worker_spin_microseconds, options.wait_spin_microseconds) {}

std::shared_ptr<Work> CommunicatorState::Failed(absl::Status status) const {
  return CompletableWork::Done(std::move(status), options.wait_spin_microseconds);
}

absl::Status CommunicatorState::CheckDevice(const Tensor& t, const char* op, const char* what) const {
  if (!t.defined()) return absl::OkStatus();
  const BackendCapabilities& caps = capabilities;
  if (t.device().is_cpu() ? caps.cpu_tensors : caps.cuda_tensors) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " is on ", t.device().ToString(), ", which the ",
                                                 caps.name, " backend does not accept; move it to ",
                                                 caps.cpu_tensors ? "the CPU" : "a CUDA device"));
}

absl::Status CommunicatorState::CheckReduceOp(ReduceOp reduce_op, DType dtype, const char* op) const {
  if (!IsValidReduceOp(static_cast<uint8_t>(reduce_op))) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": invalid reduce op ", static_cast<int>(reduce_op)));
  }
  if (IsBitwise(reduce_op)) {
    if (!IsIntegral(dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", ReduceOpName(reduce_op),
                                                     " applies to integer and bool tensors, not ", DTypeName(dtype)));
    }
    if (!capabilities.bitwise_reductions) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": the ", capabilities.name, " backend has no ",
                                                     ReduceOpName(reduce_op),
                                                     " reduction; run it on a communicator of the host backend"));
    }
  }
  if (reduce_op == ReduceOp::kAvg && dtype == DType::kBool) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": AVG has no meaning for bool tensors; use SUM (or) or PROD (and)"));
  }
  return absl::OkStatus();
}

absl::Status CommunicatorState::CheckCounts(absl::Span<const int64_t> counts, const char* op, const char* what) const {
  if (static_cast<int>(counts.size()) != size) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " has ", counts.size(),
                                                   " entries; it needs one per rank (world size ", size, ")"));
  }
  for (int r = 0; r < size; ++r) {
    // 2^48 elements bound the sum far from overflow, and no tensor is larger.
    if (counts[r] < 0 || counts[r] > (int64_t{1} << 48)) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": ", what, "[", r, "] is ", counts[r], "; element counts must be in [0, 2^48]"));
    }
  }
  return absl::OkStatus();
}

absl::Status CommunicatorState::Break(const absl::Status& status) {
  backend->Abort(status.message());  // Peers blocked on us fail now, not at their deadline.
  FailureReporter reporter;
  reporter.store = store;
  reporter.recorder = &recorder;
  reporter.rank = rank;
  reporter.size = size;
  reporter.window = options.failure_report_window;
  reporter.dump_dir = options.dump_on_failure;
  absl::Status shared = ShareFailure(status, reporter);
  queue.Break(shared);
  return shared;
}

absl::Status CommunicatorState::Fail(const Fingerprint& fingerprint, const absl::Status& status) {
  const absl::Status described(status.code(),
                               absl::StrCat("rank ", rank, ": ", Describe(fingerprint), " failed: ", status.message()));
  // Operations that were on the device together fail together: the first
  // failure breaks the group (and is shared), the others report their own.
  if (!queue.broken().ok()) return described;
  return Break(described);
}

void CommunicatorState::Run(QueuedOp& op) {
  // One clock read serves the deadline and the flight recorder: the
  // coarse clock (an eighth of a fine read's cost, per operation), so the
  // deadline counts from up to one tick earlier and gets that tick added:
  // an operation never fails before its timeout.
  const SteadyClock::time_point started = CoarseNow();
  if (!op.task) {
    RunPointToPointBatch(std::move(op));
    return;
  }
  FlightRecord record = RecordOf(op.fingerprint);
  // The name only where the recorder keeps records (no work per call when it is off).
  if (recorder.capacity() > 0 && op.fingerprint.is(communicator_internal::OpType::kAllReduce) &&
      IsValidDType(op.fingerprint.dtype)) {
    record.algorithm = backend->AllReduceAlgorithm(op.fingerprint.count, static_cast<DType>(op.fingerprint.dtype));
  }
  op.record = recorder.Start(record, started);
  OpContext op_ctx{op.fingerprint.seq, DeadlineAfter(started + coarse_tick, options.timeout), nullptr};
  // One pointer captured: std::function keeps it inline (no allocation per
  // operation).
  struct Queued {
    CompletableWork* work;
    std::function<absl::Status()> finish;
  } queued{op.work.get(), nullptr};
  std::function<absl::Status()>& finish = queued.finish;
  op_ctx.queued = [q = &queued](std::shared_ptr<StreamMarker> marker, std::function<absl::Status()> finish_op) {
    q->work->SetStreamMarker(std::move(marker));
    q->finish = std::move(finish_op);
  };
  absl::Status status;
  if (options.debug_checks && size > 1) status = CheckFingerprints(op.fingerprint, op_ctx);
  if (status.ok()) status = op.task->RunTask(op_ctx);
  if (status.ok() && finish) {
    // Queued on the device: the finisher completes it.
    queue.Defer(std::move(op), std::move(finish));
    return;
  }
  // The task's captures (the caller's tensors) are released before the
  // Work completes: once Wait returns, the communicator holds none of them.
  op.task->ReleaseTask();
  recorder.Finish(op.record, status.ok());
  if (!status.ok()) status = Fail(op.fingerprint, status);
  op.work->Complete(status);
}

void CommunicatorState::Finished(QueuedOp& op, absl::Status status) {
  op.task->ReleaseTask();  // The device is done with the tensors.
  recorder.Finish(op.record, status.ok());
  if (!status.ok()) status = Fail(op.fingerprint, status);
  op.work->Complete(status);
}

absl::Status CommunicatorState::CheckFingerprints(const Fingerprint& mine, const OpContext& op_ctx) {
  std::vector<Fingerprint> all(size);
  LOCKSTEP_RETURN_IF_ERROR(backend->AllGatherBytes(&mine, sizeof(Fingerprint), all.data(), op_ctx));
  bool same = true;
  for (const Fingerprint& f : all) same &= std::memcmp(&f, &mine, sizeof(Fingerprint)) == 0;
  if (same) return absl::OkStatus();
  std::vector<std::string> views;
  for (int r = 0; r < size; ++r) views.push_back(absl::StrCat("rank ", r, " called ", Describe(all[r])));
  return absl::FailedPreconditionError(
      absl::StrCat("collective mismatch (LOCKSTEP_DEBUG=DETAIL): ", absl::StrJoin(views, "; "),
                   ". Every rank must issue the same collectives, with the same dtype, count, root and op, "
                   "in the same order"));
}

}  // namespace communicator_internal
}  // namespace lockstep
