#include "trainers/evaluation.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "core/tensor.h"
#include "data/data_loader.h"
#include "data/strided_sampler.h"
#include "nn/last_dim_cross_entropy.h"

namespace lockstep {

absl::StatusOr<EvalCounts> EvaluateShard(Module& module, std::shared_ptr<const Dataset> dataset, int rank,
                                         int world_size, int64_t batch_size, int num_workers, Device device) {
  return EvaluateShard(module, AsExamples(std::move(dataset)), rank, world_size, batch_size, num_workers, device);
}

absl::StatusOr<EvalCounts> EvaluateShard(Module& module, std::shared_ptr<const ExampleDataset> dataset, int rank,
                                         int world_size, int64_t batch_size, int num_workers, Device device) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("EvaluateShard: rank ", rank, " of world size ", world_size));
  }
  auto sampler = std::make_shared<StridedSampler>(dataset->size(), rank, world_size);
  EvalCounts counts;
  if (sampler->size() == 0) return counts;  // More ranks than examples.
  DataLoaderOptions options;
  options.batch_size = batch_size;
  options.num_workers = num_workers;
  options.pin_memory = device.is_cuda();
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<DataLoader> loader,
                            DataLoader::Create(std::move(dataset), sampler, options));
  // Back to the caller's mode however this returns.
  struct RestoreMode {
    Module& m;
    bool training;
    ~RestoreMode() { m.Train(training); }
  } restore{module, module.is_training()};
  module.Eval();
  LOCKSTEP_RETURN_IF_ERROR(loader->StartEpoch(0));
  while (true) {
    LOCKSTEP_ASSIGN_OR_RETURN(std::optional<Batch> batch, loader->Next());
    if (!batch) break;
    if (batch->fields.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat("EvaluateShard: a batch has ", batch->fields.size(),
                                                     " fields; the test set needs the input and the targets"));
    }
    Tensor features = batch->fields[0];
    if (!device.is_cpu()) {
      LOCKSTEP_ASSIGN_OR_RETURN(features, features.To(device));
    }
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, module.Forward(features));
    LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, TargetsCrossEntropy(logits, batch->fields[1]));
    counts.loss_sum += ce.loss * ce.counted;
    counts.correct += ce.correct;
    counts.count += ce.counted;
    counts.examples += batch->fields[1].dim() > 0 ? batch->fields[1].shape()[0] : 0;
  }
  return counts;
}

absl::StatusOr<EvalCounts> SumOverRanks(const EvalCounts& counts, Communicator* comm) {
  if (comm == nullptr) return counts;
  // f64 holds counts exactly up to 2^53.
  const std::vector<double> values = {counts.loss_sum, static_cast<double>(counts.correct),
                                      static_cast<double>(counts.count), static_cast<double>(counts.examples)};
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::FromVector<double>(values));
  LOCKSTEP_RETURN_IF_ERROR(comm->AllReduce(t, ReduceOp::kSum)->Wait());
  const double* v = t.data<double>();
  return EvalCounts{v[0], static_cast<int64_t>(v[1]), static_cast<int64_t>(v[2]), static_cast<int64_t>(v[3])};
}

}  // namespace lockstep
