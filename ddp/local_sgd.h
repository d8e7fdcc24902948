// Post-local SGD, as PyTorch 1.13's post_localSGD_hook and
// PeriodicModelAverager (torch/distributed/algorithms/ddp_comm_hooks/
// post_localSGD_hook.py, model_averaging/averagers.py): after a warm-up of
// ordinary DDP iterations, gradients are averaged only inside a subgroup
// (say, the ranks of one host: no traffic across hosts), and every `period`
// steps the whole group averages the parameters.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> local,
//                             comm->Split(host_index, comm->rank()));  // this host's ranks
//   LocalSgdOptions options;
//   options.start_local_sgd_iter = 100;
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<CommHook> hook, MakePostLocalSgdHook(options, local.get()));
//   LOCKSTEP_RETURN_IF_ERROR(ddp->RegisterCommHook(std::move(hook)));
//   LOCKSTEP_ASSIGN_OR_RETURN(PeriodicModelAverager averager,
//                             PeriodicModelAverager::Create(/*period=*/4, /*warmup_steps=*/100, comm));
//   ...
//   LOCKSTEP_RETURN_IF_ERROR(averager.AverageParameters(model->Parameters()));
//
// The hook (PyTorch's rules): for the first start_local_sgd_iter backwards,
// each bucket is divided by the group's size and all-reduced over DDP's
// communicator (the iteration counts at the last bucket, and stops counting
// at the start); from then on it is divided by the subgroup's size and
// all-reduced over the subgroup, or, with post_local_gradient_allreduce
// false, left as this rank's own gradient.
//
// The averager: its step counts calls of AverageParameters; at steps
// warmup_steps, warmup_steps + period, ... the parameters that have a
// gradient are concatenated (in the order given), divided by the group's
// size, all-reduced (SUM) over `group` and written back. Use warmup_steps
// = start_local_sgd_iter, as PyTorch's documentation says.
#ifndef LOCKSTEP_DDP_LOCAL_SGD_H_
#define LOCKSTEP_DDP_LOCAL_SGD_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "ddp/comm_hook.h"
#include "nn/module.h"

namespace lockstep {

struct LocalSgdOptions {
  int64_t start_local_sgd_iter = 0;
  bool post_local_gradient_allreduce = true;
};

// `subgroup` (this rank's part of DDP's communicator; it must outlive the
// hook) is needed when post_local_gradient_allreduce is on (PyTorch would
// call new_subgroups(), which needs CUDA).
absl::StatusOr<std::unique_ptr<CommHook>> MakePostLocalSgdHook(const LocalSgdOptions& options, Communicator* subgroup);

class PeriodicModelAverager {
 public:
  // PyTorch's checks: warmup_steps >= 0 ("Arg ``warmup_steps`` must be a
  // non-negative number."), period >= 1 ("Arg ``period`` must be a positive
  // value."); period 1 is allowed (PyTorch warns that DDP alone does it
  // cheaper). `group` must outlive the averager.
  static absl::StatusOr<PeriodicModelAverager> Create(int64_t period, int64_t warmup_steps, Communicator* group);

  absl::Status AverageParameters(const std::vector<Parameter*>& parameters);

  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }  // A resumed run (PostLocalSGDOptimizer's "step").
  int64_t period() const { return period_; }

 private:
  PeriodicModelAverager(int64_t period, int64_t warmup_steps, Communicator* group)
      : period_(period), warmup_steps_(warmup_steps), group_(group) {}
  int64_t period_, warmup_steps_;
  Communicator* group_;
  int64_t step_ = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_DDP_LOCAL_SGD_H_
