#include "ddp/local_sgd.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/work_promise.h"
#include "core/kernels.h"
#include "core/status.h"

namespace lockstep {
namespace {

class PostLocalSgdHook final : public CommHook {
 public:
  PostLocalSgdHook(LocalSgdOptions options, Communicator* subgroup) : options_(options), subgroup_(subgroup) {}
  std::string name() const override { return "post_localSGD"; }

  std::shared_ptr<Work> Run(Communicator& comm, GradBucket& bucket) override {
    const Tensor& buffer = bucket.buffer();
    if (iteration_.load() < options_.start_local_sgd_iter) {
      if (bucket.is_last()) iteration_.fetch_add(1);
      if (absl::Status s = Divide(buffer, comm.size()); !s.ok()) return WorkPromise::Completed(s);
      return comm.AllReduce(buffer, ReduceOp::kSum);
    }
    if (!options_.post_local_gradient_allreduce)
      return WorkPromise::Completed(absl::OkStatus());  // Local gradients as they are.
    if (absl::Status s = Divide(buffer, subgroup_->size()); !s.ok()) return WorkPromise::Completed(s);
    return subgroup_->AllReduce(buffer, ReduceOp::kSum);
  }

 private:
  const LocalSgdOptions options_;
  Communicator* const subgroup_;
  std::atomic<int64_t> iteration_{0};
};

}  // namespace

absl::StatusOr<std::unique_ptr<CommHook>> MakePostLocalSgdHook(const LocalSgdOptions& options, Communicator* subgroup) {
  if (options.start_local_sgd_iter < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("post-local SGD: start_local_sgd_iter ", options.start_local_sgd_iter, " must be >= 0"));
  }
  if (options.post_local_gradient_allreduce && subgroup == nullptr) {
    return absl::InvalidArgumentError(
        "post-local SGD: a subgroup is needed to all-reduce gradients locally (PyTorch's new_subgroups() needs CUDA; "
        "pass this rank's subgroup, e.g. Communicator::Split by host), or set post_local_gradient_allreduce false");
  }
  return std::unique_ptr<CommHook>(new PostLocalSgdHook(options, subgroup));
}

absl::StatusOr<PeriodicModelAverager> PeriodicModelAverager::Create(int64_t period, int64_t warmup_steps,
                                                                    Communicator* group) {
  if (warmup_steps < 0) return absl::InvalidArgumentError("Arg ``warmup_steps`` must be a non-negative number.");
  if (period < 1) return absl::InvalidArgumentError("Arg ``period`` must be a positive value.");
  if (group == nullptr) return absl::InvalidArgumentError("PeriodicModelAverager: no group to average over");
  return PeriodicModelAverager(period, warmup_steps, group);
}

absl::Status PeriodicModelAverager::AverageParameters(const std::vector<Parameter*>& parameters) {
  const int64_t step = step_++;
  if (step < warmup_steps_ || (step - warmup_steps_) % period_ != 0) return absl::OkStatus();
  // utils.get_params_to_average: the parameters with a gradient.
  std::vector<Parameter*> params;
  int64_t numel = 0;
  for (Parameter* p : parameters) {
    if (p == nullptr || !p->grad.defined()) continue;
    if (p->value.dtype() != DType::kF32 || (!params.empty() && p->value.device() != params[0]->value.device())) {
      return absl::InvalidArgumentError(absl::StrCat("PeriodicModelAverager: parameter ", p->value.DebugString(),
                                                     "; f32 parameters on one device are averaged"));
    }
    params.push_back(p);
    numel += p->value.numel();
  }
  if (params.empty()) return absl::OkStatus();
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor flat, Tensor::Empty({numel}, DType::kF32, params[0]->value.device()));
  int64_t at = 0;
  for (Parameter* p : params) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor part, flat.Flat(at, p->value.numel()));
    LOCKSTEP_RETURN_IF_ERROR(part.CopyFrom(p->value));
    at += p->value.numel();
  }
  // average_parameters: divide first, then sum.
  LOCKSTEP_RETURN_IF_ERROR(Divide(flat, group_->size()));
  absl::Status s = group_->AllReduce(flat, ReduceOp::kSum)->Wait();
  if (!s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("PeriodicModelAverager at step ", step, " on rank ", group_->rank(), ": ", s.message()));
  }
  at = 0;
  for (Parameter* p : params) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor part, flat.Flat(at, p->value.numel()));
    LOCKSTEP_RETURN_IF_ERROR(p->value.CopyFrom(part));
    at += p->value.numel();
  }
  return absl::OkStatus();
}

}  // namespace lockstep
