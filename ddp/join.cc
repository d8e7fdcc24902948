#include "ddp/join.h"

#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "ddp/reducer.h"
#include "ddp/replica_sync.h"

namespace lockstep {
namespace {

// A one-element f32 all-reduce (SUM) of `value`; its result.
absl::StatusOr<float> SumOne(Communicator& comm, float value) {
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::FromVector<float>(std::vector<float>{value}));
  LOCKSTEP_RETURN_IF_ERROR(comm.AllReduce(t, ReduceOp::kSum)->Wait());
  return t.data<float>()[0];
}

// join.py's WARN_THRESHOLD.
constexpr int64_t kSkewWarning = 1000;

}  // namespace

absl::StatusOr<std::unique_ptr<Join>> Join::Create(DistributedDataParallel& ddp, JoinOptions options) {
  if (ddp.join_.enable) {
    return absl::FailedPreconditionError(
        "Join::Create: this DistributedDataParallel is already in an unfinished Join; Finish that one first");
  }
  std::unique_ptr<Join> join(new Join(ddp, options));
  ddp.join_.enable = options.enable;
  ddp.join_.throw_on_early_termination = options.throw_on_early_termination;
  ddp.join_.divide_by_initial_world_size = options.divide_by_initial_world_size;
  return join;
}

Join::~Join() {
  if (!finished_) ddp_.join_ = DistributedDataParallel::JoinConfig{};
}

absl::Status Join::Shadow() {
  DistributedDataParallel& ddp = ddp_;
  LOCKSTEP_RETURN_IF_ERROR(ddp.reducer_->RebuildBucketsIfNeeded());
  if (ddp.ShouldSyncBuffers()) LOCKSTEP_RETURN_IF_ERROR(ddp.SyncBuffers(/*is_joined=*/true));
  // The others' vote: will their backward be synchronized?
  LOCKSTEP_ASSIGN_OR_RETURN(const float synced, SumOne(ddp.comm_, 0.0f));
  const bool should_sync = synced != 0.0f;
  ddp.require_forward_param_sync_ = should_sync;
  if (!should_sync) return absl::OkStatus();
  return ddp.reducer_->ShadowBackward();
}

absl::Status Join::SyncFinalModel(bool is_last_joiner) {
  Communicator& comm = ddp_.comm_;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor rank,
                            Tensor::FromVector<int64_t>(std::vector<int64_t>{is_last_joiner ? comm.rank() : -1}));
  LOCKSTEP_RETURN_IF_ERROR(comm.AllReduce(rank, ReduceOp::kMax)->Wait());
  authoritative_rank_ = static_cast<int>(rank.data<int64_t>()[0]);
  if (authoritative_rank_ < 0) {
    return absl::InternalError(
        "Join::Finish: no rank joined last (every rank shadowed an iteration), so there is no model to take");
  }
  // _sync_module_states: every parameter (frozen ones too), then every buffer.
  std::vector<Tensor> state;
  for (Parameter* p : ddp_.module_.Parameters()) state.push_back(p->value);
  for (const NamedTensor& b : ddp_.module_.NamedBuffers()) state.push_back(b.second);
  return BroadcastCoalesced(comm, state, authoritative_rank_);
}

absl::Status Join::Finish() {
  if (finished_) return absl::FailedPreconditionError("Join::Finish: called twice");
  finished_ = true;
  const DistributedDataParallel::JoinConfig config = ddp_.join_;
  ddp_.join_ = DistributedDataParallel::JoinConfig{};
  if (!config.enable) return absl::OkStatus();
  // The shadowing below must look like a rank in the Join to the others;
  // keep the configuration while it runs.
  ddp_.join_ = config;
  Communicator& comm = ddp_.comm_;
  bool is_last_joiner = true;
  absl::Status status;
  for (;;) {
    // Matches the others' "not joined" one.
    absl::StatusOr<float> remaining = SumOne(comm, 0.0f);
    if (!remaining.ok()) {
      status = remaining.status();
      break;
    }
    if (*remaining == 0.0f) break;
    if (config.throw_on_early_termination) {
      // Matches the others' check, which then fails them.
      absl::StatusOr<float> told = SumOne(comm, 1.0f);
      status = told.ok() ? absl::FailedPreconditionError(
                               absl::StrCat("Rank ", comm.rank(),
                                            " exhausted all inputs. (Join with throw_on_early_termination: "
                                            "every rank fails at its next step)"))
                         : told.status();
      break;
    }
    if (shadowed_ == kSkewWarning + 1) {
      std::fprintf(stderr,
                   "lockstep Join: Detected uneven input skew of greater than %lld. This means that rank %d has "
                   "at least %lld fewer inputs than other currently-active ranks. This level of skew could lead "
                   "to performance degradation during training.\n",
                   static_cast<long long>(kSkewWarning), comm.rank(), static_cast<long long>(kSkewWarning));
    }
    status = Shadow();
    if (!status.ok()) break;
    is_last_joiner = false;
    ++shadowed_;
  }
  if (status.ok()) status = SyncFinalModel(is_last_joiner);
  ddp_.join_ = DistributedDataParallel::JoinConfig{};
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("Join::Finish on rank ", comm.rank(), " after ", shadowed_,
                                                    " shadowed iterations: ", status.message()));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
