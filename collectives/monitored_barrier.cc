#include "collectives/monitored_barrier.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/deadline.h"
#include "core/status.h"

namespace lockstep {
namespace {

// What rank 0 answers each rank: one int32 per rank.
enum Verdict : int32_t { kArrived = 0, kMissing = 1, kNotWaitedFor = 2 };

std::chrono::milliseconds Left(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
  return std::max(left, std::chrono::milliseconds(0));
}

std::string Failed(const std::vector<int>& missing, std::chrono::milliseconds timeout) {
  return absl::StrCat(missing.size() == 1 ? "Rank " : "Ranks ", absl::StrJoin(missing, ", "),
                      " failed to pass monitoredBarrier in ", timeout.count(), " ms");
}

absl::Status RankZero(Communicator& comm, std::chrono::milliseconds timeout, bool wait_all_ranks) {
  const int n = comm.size();
  const Deadline deadline = DeadlineIn(timeout);
  std::vector<Tensor> reports(n);
  std::vector<std::shared_ptr<Work>> received(n);
  for (int r = 1; r < n; ++r) {
    LOCKSTEP_ASSIGN_OR_RETURN(reports[r], Tensor::Zeros({1}, DType::kI32));
    received[r] = comm.Recv(reports[r], r, kMonitoredBarrierTag);
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor verdicts, Tensor::Zeros({n}, DType::kI32));
  int32_t* v = verdicts.data<int32_t>();
  std::vector<int> missing;
  for (int r = 1; r < n; ++r) {
    if (!missing.empty() && !wait_all_ranks) {
      // Not waited for: its report counts if it is here already.
      v[r] = received[r]->IsCompleted() && received[r]->status().ok() ? kArrived : kNotWaitedFor;
      continue;
    }
    const absl::Status s = received[r]->Wait(Left(deadline));
    if (s.code() == absl::StatusCode::kDeadlineExceeded) {
      v[r] = kMissing;
      missing.push_back(r);
    } else if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("MonitoredBarrier: rank 0 waiting for rank ", r, ": ", s.message()));
    }
  }
  // Everyone gets the verdicts: the ranks that came at once, the others
  // when (if) they come; nobody waits on the latter.
  std::vector<std::shared_ptr<Work>> answers;
  for (int r = 1; r < n; ++r) {
    std::shared_ptr<Work> answer = comm.Send(verdicts, r, kMonitoredBarrierTag);
    if (v[r] == kArrived) answers.push_back(std::move(answer));
  }
  for (auto& answer : answers) {
    const absl::Status s = answer->Wait(std::max(Left(deadline), std::chrono::milliseconds(1000)));
    if (!s.ok() && missing.empty()) return s;
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat("[Rank 0]: ", Failed(missing, timeout),
                   wait_all_ranks ? "" : " (rank 0 stopped waiting at the first; wait_all_ranks names them all)",
                   ". Those ranks are behind or stuck: look at what their logs say they were doing"));
}

absl::Status OtherRank(Communicator& comm, std::chrono::milliseconds timeout) {
  const int n = comm.size(), me = comm.rank();
  // Rank 0 may take the whole timeout to decide (and be late itself by as
  // much): its answer is awaited longer, so that the ranks that came learn
  // its verdict rather than time out beside it.
  const std::chrono::milliseconds patience = 2 * timeout + std::chrono::milliseconds(10000);
  const Deadline deadline = DeadlineIn(patience);
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor report, Tensor::Zeros({1}, DType::kI32));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor verdicts, Tensor::Zeros({n}, DType::kI32));
  std::shared_ptr<Work> sent = comm.Send(report, 0, kMonitoredBarrierTag);
  std::shared_ptr<Work> answer = comm.Recv(verdicts, 0, kMonitoredBarrierTag);
  absl::Status s = answer->Wait(Left(deadline));
  if (s.code() == absl::StatusCode::kDeadlineExceeded) {
    return absl::DeadlineExceededError(
        absl::StrCat("[Rank ", me, "]: MonitoredBarrier: rank 0 did not answer within ", patience.count(),
                     " ms: rank 0 is behind or stuck (its own error, if any, names the ranks it waited for)"));
  }
  if (!s.ok()) return s;
  LOCKSTEP_RETURN_IF_ERROR(sent->Wait(std::chrono::milliseconds(1000)));
  const int32_t* v = verdicts.data<int32_t>();
  std::vector<int> missing;
  for (int r = 1; r < n; ++r) {
    if (v[r] == kMissing) missing.push_back(r);
  }
  if (v[me] == kMissing) {
    return absl::DeadlineExceededError(absl::StrCat("[Rank ", me, "]: MonitoredBarrier: this rank came after rank 0 ",
                                                    "stopped waiting for it (", timeout.count(), " ms)"));
  }
  // A rank that came learns of the others' failure in gloo's words (which
  // PyTorch's tests and users' log scrapers look for), then rank 0's report.
  const std::string reached = absl::StrCat("[Rank ", me, "]: Rank ", me,
                                           " successfully reached monitoredBarrier, but received errors while "
                                           "waiting for send/recv from rank 0: ");
  if (v[me] == kNotWaitedFor) {
    return absl::DeadlineExceededError(absl::StrCat(reached, "rank 0 stopped at the first missing rank before this ",
                                                    "rank's report came; rank 0 reports: ", Failed(missing, timeout)));
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat(reached, "rank 0 reports: ", Failed(missing, timeout)));
}

}  // namespace

absl::Status MonitoredBarrier(Communicator& comm, std::chrono::milliseconds timeout, bool wait_all_ranks) {
  if (timeout <= std::chrono::milliseconds(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("MonitoredBarrier: timeout is ", timeout.count(), " ms; give a positive one"));
  }
  if (comm.size() == 1) return absl::OkStatus();
  return comm.rank() == 0 ? RankZero(comm, timeout, wait_all_ranks) : OtherRank(comm, timeout);
}

}  // namespace lockstep
