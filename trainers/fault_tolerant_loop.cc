#include "trainers/fault_tolerant_loop.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/fd.h"
#include "core/status.h"
#include "data/elastic_sampler.h"
#include "ddp/heal.h"
#include "nn/last_dim_cross_entropy.h"

namespace lockstep {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

constexpr char kEpochKey[] = "ft.epoch";
constexpr char kBatchKey[] = "ft.batch";
constexpr char kSamplerKey[] = "ft.sampler";

class Loop {
 public:
  Loop(const FaultTolerantOptions& o, const FaultTolerantParts& p)
      : o_(o), p_(p), group_(*p.group), step_(std::make_shared<std::atomic<int64_t>>(0)) {}

  absl::StatusOr<FaultTolerantResult> Run();

 private:
  // The failed operation's status: every survivor re-forms the group.
  absl::Status Reform(const absl::Status& why);
  // After a re-formation (or at the start): heal, re-deal, new stepper.
  // Not OK: a collective failed (re-form) or a real error (returned).
  absl::Status Heal(bool* collective_failed);
  // One step; `*collective_failed` when a collective failed.
  absl::Status Step(const std::vector<int64_t>& batch, bool* collective_failed);
  absl::Status Log();
  std::string Prefix() const {
    return absl::StrCat(o_.program, ": rank ", group_.rank(), " (member ", group_.member(), ")");
  }
  int64_t Batches() const {
    const int64_t mine = sampler_->size();
    return (mine + o_.loop.batch_size - 1) / o_.loop.batch_size;
  }
  std::vector<int64_t> BatchOf(const std::vector<int64_t>& list, int64_t b) const {
    const int64_t lo = std::min<int64_t>(b * o_.loop.batch_size, list.size());
    const int64_t hi = std::min<int64_t>(lo + o_.loop.batch_size, list.size());
    return std::vector<int64_t>(list.begin() + lo, list.begin() + hi);
  }
  // This rank's entries of the current list (and, when logging, every
  // rank's), computed once per change of the sampler: an epoch's order is a
  // permutation of the whole dataset.
  absl::Status Refresh();

  const FaultTolerantOptions& o_;
  const FaultTolerantParts& p_;
  ElasticGroup& group_;
  std::shared_ptr<std::atomic<int64_t>> step_;
  std::unique_ptr<ModelStepper> stepper_;
  std::optional<ElasticSampler> sampler_;
  std::vector<std::vector<int64_t>> lists_;  // By rank; empty: to compute (Refresh).
  std::vector<int64_t> mine_;
  int64_t epoch_ = 0;
  int64_t batch_ = 0;  // Batches committed of the current list.
  bool reformed_ = false;
  bool healed_once_ = false;  // A newcomer's first healing is said even at step 0.
  Fd log_;                    // <log_dir>/member-<id>.jsonl, appended.
  FaultTolerantResult result_;
  EvalCounts window_;  // result_.train at the last step line.
  static constexpr int kMaxReformsWithoutProgress = 8;
  int reforms_without_progress_ = 0;
};

absl::Status Loop::Reform(const absl::Status& why) {
  const Clock::time_point t0 = Clock::now();
  stepper_.reset();  // It holds the old communicator.
  // An error that is not a lost member (a model that cannot run) would
  // fail again in every group: give up after a few re-formations in a row
  // without a committed step.
  if (++reforms_without_progress_ > kMaxReformsWithoutProgress) {
    return absl::Status(why.code(), absl::StrCat(Prefix(), ": ", kMaxReformsWithoutProgress,
                                                 " re-formations in a row without a committed step; the last "
                                                 "failure: ",
                                                 why.message()));
  }
  const int old_size = group_.size();
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<int> lost, group_.Shrink());
  ++result_.reformations;
  reformed_ = true;
  const double s = Seconds(Clock::now() - t0);
  result_.reform_seconds += s;
  std::string cause(why.message().substr(0, 160));
  std::replace(cause.begin(), cause.end(), '\n', ' ');
  std::printf("%s: %s; member(s) %s lost; group re-formed with %d of %d ranks in %.3f s (epoch %lld)\n",
              Prefix().c_str(), cause.c_str(), lost.empty() ? "none" : absl::StrJoin(lost, ",").c_str(), group_.size(),
              old_size, s, static_cast<long long>(group_.epoch()));
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::Status Loop::Heal(bool* collective_failed) {
  *collective_failed = false;
  const Clock::time_point t0 = Clock::now();
  if (reformed_ && o_.inject.Kills(KillPoint::kAgreement, step_->load(), group_.member())) KillSelf();
  std::map<std::string, std::string> state = {
      {kEpochKey, absl::StrCat(epoch_)}, {kBatchKey, absl::StrCat(batch_)}, {kSamplerKey, sampler_->State()}};
  absl::StatusOr<HealResult> healed = HealFromPeer(group_.comm(), step_->load(), *p_.model, p_.optimizer, &state);
  if (!healed.ok()) {
    *collective_failed = true;
    return healed.status();
  }
  const int64_t before = step_->load();
  if (healed->healed) {
    if (!absl::SimpleAtoi(state[kEpochKey], &epoch_) || !absl::SimpleAtoi(state[kBatchKey], &batch_)) {
      return absl::DataLossError(absl::StrCat(Prefix(), ": the healing peer's epoch '", state[kEpochKey],
                                              "' or batch '", state[kBatchKey], "' is not a number"));
    }
    // Its rank 0 here: the world is set by the re-deal below.
    sampler_->SetEpoch(epoch_);
    LOCKSTEP_RETURN_IF_ERROR(sampler_->SetState(state[kSamplerKey], 0));
    mine_.clear();
    step_->store(healed->step);
    if (before != healed->step || (p_.joined && !healed_once_)) {
      std::printf("%s: healed from rank %d: step %lld -> %lld\n", Prefix().c_str(), healed->source,
                  static_cast<long long>(before), static_cast<long long>(healed->step));
      std::fflush(stdout);
    }
  }
  healed_once_ = true;
  // Every member now holds the same epoch, batch and sampler: each re-deals
  // what the committed steps left to the group of now, identically.
  if (sampler_->world() != group_.size() || sampler_->rank() != group_.rank() || reformed_) {
    const int64_t consumed = batch_ * o_.loop.batch_size * sampler_->world();
    LOCKSTEP_RETURN_IF_ERROR(
        sampler_->Reshard(std::min(consumed, sampler_->list_size()), group_.size(), group_.rank()));
    mine_.clear();
    batch_ = 0;
  }
  std::unique_ptr<CommHook> hook;
  // Every member reduces alike (the hook's numbers are the default's only
  // up to rounding); the hook kills only the member named.
  for (const KillAt& k : o_.inject.kills) {
    if (k.point == KillPoint::kLastBucket) {
      hook = MakeKillingAllReduceHook(o_.inject, group_.member(), step_);
      break;
    }
  }
  absl::StatusOr<std::unique_ptr<ModelStepper>> stepper = p_.make_stepper(group_.comm(), std::move(hook));
  if (!stepper.ok()) {
    *collective_failed = true;  // Its broadcast from rank 0 failed, or a real error: the re-formation says.
    return stepper.status();
  }
  stepper_ = *std::move(stepper);
  reformed_ = false;
  if (result_.reformations + result_.admissions > 0) result_.reform_seconds += Seconds(Clock::now() - t0);
  return absl::OkStatus();
}

absl::Status Loop::Refresh() {
  if (!mine_.empty() || sampler_->size() == 0) return absl::OkStatus();
  mine_ = sampler_->Indices();
  if (!log_.valid()) return absl::OkStatus();
  lists_.assign(static_cast<size_t>(group_.size()), {});
  for (int r = 0; r < group_.size(); ++r) {
    if (r == group_.rank()) {
      lists_[r] = mine_;
      continue;
    }
    ElasticSampler other = *sampler_;
    LOCKSTEP_RETURN_IF_ERROR(other.SetState(sampler_->State(), r));
    lists_[r] = other.Indices();
  }
  return absl::OkStatus();
}

absl::Status Loop::Step(const std::vector<int64_t>& batch, bool* collective_failed) {
  *collective_failed = false;
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<Tensor> fields, StackExamples(*p_.train, batch, /*pinned=*/false));
  if (fields.size() < 2) {
    return absl::InvalidArgumentError("RunFaultTolerantTraining: the training set needs the input and the targets");
  }
  absl::StatusOr<Tensor> logits = stepper_->Forward(fields[0]);
  if (!logits.ok()) {
    *collective_failed = true;
    return logits.status();
  }
  LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, TargetsCrossEntropy(*logits, fields[1]));
  if (o_.inject.Kills(KillPoint::kBackward, step_->load(), group_.member())) KillSelf();
  absl::Status backward = stepper_->Backward(ce.grad_logits);
  if (!backward.ok()) {
    // Nothing of a cut-short reduction is stepped on.
    LOCKSTEP_RETURN_IF_ERROR(p_.optimizer->ZeroGrad());
    *collective_failed = true;
    return backward;
  }
  // Committed: this member holds the step's complete reduced gradients.
  if (o_.loop.clip_grad_norm > 0) {
    std::vector<Parameter*> params;
    for (const NamedParameter& p : p_.optimizer->parameters()) params.push_back(p.parameter);
    LOCKSTEP_RETURN_IF_ERROR(stepper_->ClipGradNorm(params, o_.loop.clip_grad_norm).status());
  }
  LOCKSTEP_RETURN_IF_ERROR(p_.optimizer->Step());
  LOCKSTEP_RETURN_IF_ERROR(p_.optimizer->ZeroGrad());
  const int64_t examples = fields[1].dim() > 0 ? fields[1].shape()[0] : 0;
  result_.train.loss_sum += ce.loss * ce.counted;
  result_.train.correct += ce.correct;
  result_.train.count += ce.counted;
  result_.train.examples += examples;
  return absl::OkStatus();
}

absl::Status Loop::Log() {
  if (!log_.valid()) return absl::OkStatus();
  // Every rank's batch of the step just committed, from copies of this
  // member's sampler (the same list on every member).
  std::vector<std::string> batches;
  for (const std::vector<int64_t>& list : lists_) {
    batches.push_back(absl::StrCat("[", absl::StrJoin(BatchOf(list, batch_ - 1), ","), "]"));
  }
  const std::string line = absl::StrFormat(
      "{\"step\":%d,\"epoch\":%d,\"group_epoch\":%d,\"world\":%d,\"rank\":%d,\"member\":%d,\"checksum\":\"%s\","
      "\"batches\":[%s]}\n",
      step_->load(), epoch_, group_.epoch(), group_.size(), group_.rank(), group_.member(),
      ParameterChecksum(*p_.model), absl::StrJoin(batches, ","));
  if (!WriteFully(log_.get(), line)) {
    return absl::DataLossError(absl::StrCat(Prefix(), ": writing its log in ", o_.log_dir, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<FaultTolerantResult> Loop::Run() {
  if (p_.group == nullptr || p_.model == nullptr || p_.optimizer == nullptr || !p_.make_stepper ||
      p_.train == nullptr) {
    return absl::InvalidArgumentError(
        "RunFaultTolerantTraining: the group, model, optimizer, make_stepper and train set are required");
  }
  if (o_.loop.batch_size < 1 || o_.loop.epochs < 0) {
    return absl::InvalidArgumentError("RunFaultTolerantTraining: batch_size must be >= 1 and epochs >= 0");
  }
  if (!o_.log_dir.empty()) {
    // Never through a planted symlink, FIFO or device: root appends here.
    const std::string path = absl::StrCat(o_.log_dir, "/member-", group_.member(), ".jsonl");
    log_ = Fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0644));
    struct stat st;
    if (!log_.valid() || ::fstat(log_.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(
          Prefix(), ": cannot append to ", path, " (", log_.valid() ? "not a regular file" : std::strerror(errno),
          "); give --ft_log_dir a directory of your own, without links or special files under these names"));
    }
  }
  DistributedSamplerOptions so;
  so.num_replicas = group_.size();
  so.rank = group_.rank();
  so.seed = static_cast<int64_t>(o_.loop.seed);
  LOCKSTEP_ASSIGN_OR_RETURN(ElasticSampler sampler, ElasticSampler::Create(p_.train->size(), so));
  sampler_ = std::move(sampler);
  sampler_->SetEpoch(0);
  // A newcomer re-deals with the members, whatever its first sampler was.
  reformed_ = p_.joined;
  const Clock::time_point start = Clock::now();
  bool need_heal = true;
  bool collective_failed = false;
  auto failed = [&](const absl::Status& s) -> absl::Status {
    if (!collective_failed) return s;  // A real error: not the group's.
    need_heal = true;
    return Reform(s);
  };
  // After a re-formation: heal and a new stepper; false when that failed
  // too and the group re-formed again (try once more).
  auto heal_if_needed = [&]() -> absl::StatusOr<bool> {
    if (!need_heal) return true;
    absl::Status healed = Heal(&collective_failed);
    if (!healed.ok()) {
      LOCKSTEP_RETURN_IF_ERROR(failed(healed));
      return false;
    }
    need_heal = false;
    return true;
  };
  while (true) {
    LOCKSTEP_ASSIGN_OR_RETURN(const bool ready, heal_if_needed());
    if (!ready) continue;
    if (o_.loop.max_steps > 0 && step_->load() >= o_.loop.max_steps) break;
    // (A member healed from one that finished has epoch_ == epochs.)
    if (epoch_ >= o_.loop.epochs) break;
    if (batch_ >= Batches()) {
      ++epoch_;
      batch_ = 0;
      sampler_->SetEpoch(epoch_);
      mine_.clear();
      continue;
    }
    if (o_.inject.await_step >= 0 && step_->load() == o_.inject.await_step) {
      LOCKSTEP_RETURN_IF_ERROR(group_.WaitForNewcomers(o_.inject.await_count));
    }
    // Every admit_every steps (by step number, so every member asks at the
    // same ones): one store read on rank 0 and a small broadcast.
    const bool ask =
        o_.admit_every <= 1 || step_->load() % o_.admit_every == 0 || o_.inject.await_step == step_->load();
    absl::StatusOr<int> admitted = ask ? group_.AdmitNewcomers() : absl::StatusOr<int>(0);
    if (!admitted.ok()) {
      collective_failed = true;
      LOCKSTEP_RETURN_IF_ERROR(failed(admitted.status()));
      continue;
    }
    if (*admitted > 0) {
      // The communicator changed under the stepper.
      stepper_.reset();
      ++result_.admissions;
      reformed_ = true;
      need_heal = true;
      std::printf("%s: admitted %d newcomer(s); the group has %d ranks (epoch %lld)\n", Prefix().c_str(), *admitted,
                  group_.size(), static_cast<long long>(group_.epoch()));
      std::fflush(stdout);
      continue;
    }
    LOCKSTEP_RETURN_IF_ERROR(Refresh());
    const std::vector<int64_t> batch = BatchOf(mine_, batch_);
    absl::Status stepped = Step(batch, &collective_failed);
    if (!stepped.ok()) {
      LOCKSTEP_RETURN_IF_ERROR(failed(stepped));
      continue;
    }
    step_->fetch_add(1);
    ++batch_;
    reforms_without_progress_ = 0;
    LOCKSTEP_RETURN_IF_ERROR(Log());
    if (o_.loop.log_every > 0 && step_->load() % o_.loop.log_every == 0 && group_.rank() == 0) {
      // This rank's batches only: a reduction would add a collective.
      const EvalCounts w{result_.train.loss_sum - window_.loss_sum, result_.train.correct - window_.correct,
                         result_.train.count - window_.count, result_.train.examples - window_.examples};
      std::printf("%s: step %lld  loss %.4f  acc %.2f%%  (rank 0's last %lld steps)  %d ranks\n", o_.program.c_str(),
                  static_cast<long long>(step_->load()), w.loss(), 100 * w.accuracy(),
                  static_cast<long long>(o_.loop.log_every), group_.size());
      std::fflush(stdout);
      window_ = result_.train;
    }
  }
  result_.epochs_done = epoch_;
  // Evaluation over the final group, every test example once; a member
  // lost here re-forms the group like any other.
  while (p_.test != nullptr) {
    LOCKSTEP_ASSIGN_OR_RETURN(const bool ready, heal_if_needed());
    if (!ready) continue;
    LOCKSTEP_ASSIGN_OR_RETURN(EvalCounts mine, EvaluateShard(*p_.model, p_.test, group_.rank(), group_.size(),
                                                             o_.loop.batch_size, 0, o_.loop.device));
    absl::StatusOr<EvalCounts> all = SumOverRanks(mine, &group_.comm());
    if (!all.ok()) {
      collective_failed = true;
      LOCKSTEP_RETURN_IF_ERROR(failed(all.status()));
      continue;
    }
    result_.test = *all;
    result_.evaluated = true;
    break;
  }
  result_.steps = step_->load();
  result_.seconds = Seconds(Clock::now() - start);
  stepper_.reset();
  return result_;
}

}  // namespace

absl::StatusOr<FaultTolerantResult> RunFaultTolerantTraining(const FaultTolerantOptions& options,
                                                             const FaultTolerantParts& parts) {
  Loop loop(options, parts);
  return loop.Run();
}

std::string ParameterChecksum(Module& model) {
  uint64_t h = 1469598103934665603ull;
  for (const NamedParameter& p : model.NamedParameters()) {
    const auto* bytes = static_cast<const unsigned char*>(p.parameter->value.raw_data());
    for (size_t i = 0; i < p.parameter->value.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return absl::StrFormat("%016x", h);
}

}  // namespace lockstep
