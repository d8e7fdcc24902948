// FaultInjection: where a fault-tolerant run (trainers/fault_tolerant_loop.h)
// kills one of its own members, for the kill tests and the time-lost
// benchmark. Read from LOCKSTEP_FT_KILL; empty: nothing is injected.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(FaultInjection inject,
//                             ParseFaultInjection("backward@8:2,await@14:1"));
//   // member 2 SIGKILLs itself in step 8's backward; before step 14 the
//   // members wait until one newcomer has registered
//
// Items, comma-separated:
//   backward@S:M     member M, in step S, after its forward and before its
//                    backward (its peers are inside theirs, reducing buckets);
//   last_bucket@S:M  member M, in step S, right after posting the last
//                    bucket's all-reduce (its bytes partly sent);
//   agreement@S:M    member M, at the first re-formation agreement
//                    (ddp/heal.h) at step >= S: a second failure while the
//                    group re-forms after a first;
//   await@S:N        before step S every member waits until N newcomers have
//                    registered (ElasticGroup::WaitForNewcomers), so that a
//                    test's replacement joins before the run ends.
// Steps count committed optimizer steps from 0. Members are ElasticGroup
// ids (a replacement gets a new one, so it is never killed again).
#ifndef LOCKSTEP_TRAINERS_FAULT_INJECTION_H_
#define LOCKSTEP_TRAINERS_FAULT_INJECTION_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ddp/comm_hook.h"

namespace lockstep {

enum class KillPoint { kBackward, kLastBucket, kAgreement };

struct KillAt {
  KillPoint point = KillPoint::kBackward;
  int64_t step = 0;
  int member = 0;
};

struct FaultInjection {
  std::vector<KillAt> kills;
  int64_t await_step = -1;  // -1: no wait.
  int64_t await_count = 0;

  bool empty() const { return kills.empty() && await_step < 0; }
  // Whether `member` dies at `point` in `step` (kAgreement: at or after).
  bool Kills(KillPoint point, int64_t step, int member) const;
};

// The grammar above; InvalidArgument naming the item otherwise.
absl::StatusOr<FaultInjection> ParseFaultInjection(absl::string_view spec);

// SIGKILL to this process, after flushing stdio (what a crash loses is the
// point: nothing else is cleaned up).
[[noreturn]] void KillSelf();

// PyTorch's allreduce_hook, that kills `member` right after posting the last
// bucket's all-reduce of step `*step` when `inject` says so.
std::unique_ptr<CommHook> MakeKillingAllReduceHook(const FaultInjection& inject, int member,
                                                   std::shared_ptr<const std::atomic<int64_t>> step);

}  // namespace lockstep

#endif  // LOCKSTEP_TRAINERS_FAULT_INJECTION_H_
