// Join: data-parallel training on inputs of uneven length, as PyTorch 1.13's
// torch.distributed.algorithms.join.Join with DistributedDataParallel as its
// joinable. A rank that has run out of batches "joins": until every rank has,
// it shadows the collectives of the others' iterations, so they neither hang
// nor fail, and at the end every rank takes the model of a rank that joined
// last.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Join> join, Join::Create(*ddp));   // `with Join([ddp]):`
//   for (const Batch& batch : my_batches) {              // a different count on each rank
//     LOCKSTEP_ASSIGN_OR_RETURN(Tensor out, ddp->Forward(batch.x));
//     ...
//     LOCKSTEP_RETURN_IF_ERROR(ddp->Backward(grad));
//     LOCKSTEP_RETURN_IF_ERROR(optimizer->Step());
//   }
//   LOCKSTEP_RETURN_IF_ERROR(join->Finish());            // the end of the `with` block
//
// Semantics (distributed.py's _DDPJoinHook, join.py's Join):
//   * While the Join is open, each DDP forward of a rank that has not joined
//     all-reduces a one (the count of such ranks) and, after the buffers'
//     broadcast, whether its backward will be synchronized. Finish, on a
//     rank that has joined, answers each of the others' iterations with
//     zeros: the count, the bucket rebuild's broadcasts, the buffers'
//     broadcast (whose source is then the largest rank that has not joined),
//     and, when that iteration's backward is synchronized, one all-reduce of
//     zeros per gradient bucket (through the comm hook, if one is set) and
//     the used-parameter map with find_unused_parameters.
//   * Gradients: with divide_by_initial_world_size (the default) the sum over
//     the ranks that have not joined is divided by the group's size, as if
//     the joined ranks contributed zeros; without it, by the number of ranks
//     that have not joined this iteration. A comm hook divides by the
//     group's size either way (as PyTorch's).
//   * When every rank has joined, Finish broadcasts all parameters and
//     buffers from the largest rank among those that joined last (they never
//     shadowed), so every rank ends with that model. Optimizer state is not
//     synchronized (the joined ranks' optimizers stopped stepping), as in
//     PyTorch.
//   * throw_on_early_termination: instead of shadowing, the first rank to
//     join makes every rank fail: the others at their next Forward with
//     "Detected at least one rank that exhausted inputs. Throwing across all
//     ranks.", itself with "Rank <r> exhausted all inputs.". No final sync.
//   * enable = false: no collectives at all (the inputs are known to be
//     even); Finish returns at once.
//
// Collectives inside the model's own forward or backward (SyncBatchNorm)
// cannot be shadowed: a joined rank would not issue them (PyTorch hangs
// there; lockstep's fingerprint check or timeout turns it into an error).
// Use throw_on_early_termination with such models.
//
// Every rank calls Finish exactly once; then the DDP is as before the Join.
// Destroying an unfinished Join leaves the DDP outside it, without shadowing
// (the others would time out: finish it, or fail the step, on every rank).
#ifndef LOCKSTEP_DDP_JOIN_H_
#define LOCKSTEP_DDP_JOIN_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ddp/distributed_data_parallel.h"

namespace lockstep {

struct JoinOptions {
  bool enable = true;
  bool throw_on_early_termination = false;
  bool divide_by_initial_world_size = true;
};

class Join {
 public:
  // `ddp` must outlive the Join; one Join per DDP at a time
  // (FailedPrecondition otherwise).
  static absl::StatusOr<std::unique_ptr<Join>> Create(DistributedDataParallel& ddp, JoinOptions options = {});
  ~Join();
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  // Shadows the others' iterations until every rank has joined, then
  // synchronizes the final model (see above). Once only.
  absl::Status Finish();

  // Iterations this rank shadowed in Finish (0 for a rank that joined last).
  int64_t shadowed_iterations() const { return shadowed_; }
  // The rank whose model every rank took (-1 before Finish or without one).
  int authoritative_rank() const { return authoritative_rank_; }

 private:
  Join(DistributedDataParallel& ddp, JoinOptions options) : ddp_(ddp), options_(options) {}
  // One shadowed iteration (_DDPJoinHook.main_hook).
  absl::Status Shadow();
  absl::Status SyncFinalModel(bool is_last_joiner);

  DistributedDataParallel& ddp_;
  const JoinOptions options_;
  bool finished_ = false;
  int64_t shadowed_ = 0;
  int authoritative_rank_ = -1;
};

}  // namespace lockstep

#endif  // LOCKSTEP_DDP_JOIN_H_
