#include "trainers/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace lockstep {

bool FaultInjection::Kills(KillPoint point, int64_t step, int member) const {
  for (const KillAt& k : kills) {
    if (k.point != point || k.member != member) continue;
    if (point == KillPoint::kAgreement ? step >= k.step : step == k.step) return true;
  }
  return false;
}

absl::StatusOr<FaultInjection> ParseFaultInjection(absl::string_view spec) {
  FaultInjection out;
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    auto bad = [&] {
      return absl::InvalidArgumentError(absl::StrCat(
          "LOCKSTEP_FT_KILL: '", item,
          "' is not backward@STEP:MEMBER, last_bucket@STEP:MEMBER, agreement@STEP:MEMBER or await@STEP:COUNT"));
    };
    std::vector<absl::string_view> at = absl::StrSplit(item, '@');
    if (at.size() != 2) return bad();
    std::vector<absl::string_view> nums = absl::StrSplit(at[1], ':');
    int64_t step = 0, n = 0;
    if (nums.size() != 2 || !absl::SimpleAtoi(nums[0], &step) || !absl::SimpleAtoi(nums[1], &n) || step < 0 || n < 0 ||
        n > (int64_t{1} << 30)) {
      return bad();
    }
    if (at[0] == "await") {
      out.await_step = step;
      out.await_count = n;
      continue;
    }
    KillAt k;
    k.step = step;
    k.member = static_cast<int>(n);
    if (at[0] == "backward") {
      k.point = KillPoint::kBackward;
    } else if (at[0] == "last_bucket") {
      k.point = KillPoint::kLastBucket;
    } else if (at[0] == "agreement") {
      k.point = KillPoint::kAgreement;
    } else {
      return bad();
    }
    out.kills.push_back(k);
  }
  return out;
}

void KillSelf() {
  std::fflush(nullptr);
  ::kill(::getpid(), SIGKILL);
  _exit(137);  // Not reached.
}

namespace {

class KillingAllReduceHook : public CommHook {
 public:
  KillingAllReduceHook(const FaultInjection& inject, int member, std::shared_ptr<const std::atomic<int64_t>> step)
      : inner_(MakeAllReduceHook()), inject_(inject), member_(member), step_(std::move(step)) {}
  std::string name() const override { return inner_->name(); }
  std::shared_ptr<Work> Run(Communicator& comm, GradBucket& bucket) override {
    std::shared_ptr<Work> work = inner_->Run(comm, bucket);
    if (bucket.is_last() && inject_.Kills(KillPoint::kLastBucket, step_->load(), member_)) KillSelf();
    return work;
  }

 private:
  std::unique_ptr<CommHook> inner_;
  FaultInjection inject_;
  int member_;
  std::shared_ptr<const std::atomic<int64_t>> step_;
};

}  // namespace

std::unique_ptr<CommHook> MakeKillingAllReduceHook(const FaultInjection& inject, int member,
                                                   std::shared_ptr<const std::atomic<int64_t>> step) {
  return std::make_unique<KillingAllReduceHook>(inject, member, std::move(step));
}

}  // namespace lockstep
