// Evaluation over ranks that counts every test example exactly once: rank r
// evaluates indices r, r+W, r+2W, ... < N (StridedSampler,
// data/strided_sampler.h: no padding, unlike DistributedSampler), and the
// ranks' counts are summed. The training loop (train_loop.h) runs it after
// every epoch; libtorch's trainers (interop/torch/trainers) call it directly.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(EvalCounts mine, EvaluateShard(model, test_set, rank, world_size,
//                                                            /*batch_size=*/64, /*num_workers=*/0, device));
//   LOCKSTEP_ASSIGN_OR_RETURN(EvalCounts all, SumOverRanks(mine, comm));  // comm null: one process
//   std::printf("test loss %.4f acc %.2f%%\n", all.loss(), 100 * all.accuracy());
//
// The shard runs on the plain module in eval mode (not through DDP, whose
// forward would issue collectives that ranks with one batch less never
// match). The loss is TargetsCrossEntropy (nn/last_dim_cross_entropy.h):
// field 0 of each example is the input, field 1 the integer targets, and
// loss and accuracy are per prediction (per position of a sequence model).
#ifndef LOCKSTEP_TRAINERS_EVALUATION_H_
#define LOCKSTEP_TRAINERS_EVALUATION_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "core/device.h"
#include "data/dataset.h"
#include "data/example_dataset.h"
#include "nn/module.h"

namespace lockstep {

// Loss, accuracy and counts; sums so that ranks can add them up.
struct EvalCounts {
  double loss_sum = 0;  // Sum over predictions of the per-prediction loss.
  int64_t correct = 0;
  int64_t count = 0;     // Predictions (examples, or tokens of a sequence model).
  int64_t examples = 0;  // Examples they came from.
  double loss() const { return count ? loss_sum / count : 0.0; }
  double accuracy() const { return count ? static_cast<double>(correct) / count : 0.0; }
};

// Evaluates rank `rank`'s share (StridedSampler) of `dataset` on `module`
// (switched to eval mode and back to the mode it was in); no reduction.
absl::StatusOr<EvalCounts> EvaluateShard(Module& module, std::shared_ptr<const Dataset> dataset, int rank,
                                         int world_size, int64_t batch_size, int num_workers, Device device);

// The same over examples of any fields (field 0 input, field 1 targets).
absl::StatusOr<EvalCounts> EvaluateShard(Module& module, std::shared_ptr<const ExampleDataset> dataset, int rank,
                                         int world_size, int64_t batch_size, int num_workers, Device device);

// Sums `counts` over the ranks of `comm` (a no-op when comm is null). Every
// rank of `comm` must call it: it is one all-reduce.
absl::StatusOr<EvalCounts> SumOverRanks(const EvalCounts& counts, Communicator* comm);

}  // namespace lockstep

#endif  // LOCKSTEP_TRAINERS_EVALUATION_H_
