#include "trainers/fsdp_stepper.h"

#include <utility>

#include "core/status.h"
#include "fsdp/clip_grad.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<FsdpStepper>> FsdpStepper::Create(Module& module, Communicator& comm,
                                                                 FullyShardOptions options) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FullyShard> fsdp, FullyShard::Create(module, comm, std::move(options)));
  return std::unique_ptr<FsdpStepper>(new FsdpStepper(std::move(fsdp)));
}

absl::Status FsdpStepper::BeginShard() {
  return absl::UnimplementedError(
      "FsdpStepper: uneven shards are not supported (a rank that has run out of data would have to shadow every "
      "unit's all-gathers and reduce-scatters); use even shards");
}

absl::Status FsdpStepper::SetSync(bool sync) {
  if (sync) {
    no_sync_.reset();
  } else if (!no_sync_) {
    no_sync_.emplace(fsdp_->NoSync());
  }
  return absl::OkStatus();
}

uint64_t FsdpStepper::BytesSent() {
  uint64_t sent = 0;
  for (uint64_t b : fsdp_->comm().Traffic().bytes_sent) sent += b;
  return sent;
}

absl::StatusOr<double> FsdpStepper::ClipGradNorm(const std::vector<Parameter*>& parameters, double max_norm) {
  // `parameters` are the ShardedOptimizer's: the shards FullyShard knows.
  return ClipShardedGradNorm(*fsdp_, max_norm);
}

}  // namespace lockstep
