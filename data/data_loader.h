// DataLoader: batches of a Dataset in the order a Sampler gives, optionally
// prepared by background threads.
//
//   DataLoaderOptions options;
//   options.batch_size = 128;
//   options.num_workers = 2;          // 0: batches are made in Next() itself
//   LOCKSTEP_ASSIGN_OR_RETURN(auto loader, DataLoader::Create(dataset, sampler, options));
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     LOCKSTEP_RETURN_IF_ERROR(loader->StartEpoch(epoch));  // calls sampler->SetEpoch(epoch)
//     while (true) {
//       LOCKSTEP_ASSIGN_OR_RETURN(std::optional<Batch> batch, loader->Next());
//       if (!batch) break;             // end of epoch
//       Train(batch->features, batch->labels);
//     }
//   }
//
// Semantics, as torch.utils.data.DataLoader:
//   * Batch k holds the sampler's indices [k*B, (k+1)*B); the last, shorter
//     batch is dropped with drop_last. Batches come out in this order whatever
//     num_workers is, so results never depend on the worker count.
//   * At most num_workers * prefetch_factor batches are in flight (made but
//     not yet returned): memory stays bounded however slow the consumer is.
//   * features: f32 [B, example_shape...]; labels: i64 [B]. With pin_memory
//     the batch lives in page-locked memory when a GPU is visible.
//   * Over an ExampleDataset (data/example_dataset.h: examples of several
//     tensors of any dtype), batch.fields holds one tensor per field, made
//     by the CollateFn given (default StackExamples: [B, shape...] each);
//     features and labels are then empty. Over a Dataset, fields holds
//     features and labels. The index order, workers and resume are the same
//     for both.
//   * An error inside a worker is returned by the Next() that would have
//     returned that batch, naming the batch and the cause; the epoch then
//     ends (StartEpoch begins a new one).
//   * StartEpoch() during an epoch, or destroying the loader, stops and joins
//     the workers; nothing leaks.
//   * StartEpoch(epoch, k) resumes an epoch at batch k: the same order as
//     StartEpoch(epoch), batches 0..k-1 skipped without being made (a
//     restarted run continues where its checkpoint left off).
// One thread drives a loader (StartEpoch/Next are not for concurrent use).
#ifndef LOCKSTEP_DATA_DATA_LOADER_H_
#define LOCKSTEP_DATA_DATA_LOADER_H_

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "data/dataset.h"
#include "data/example_dataset.h"
#include "data/sampler.h"

namespace lockstep {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool drop_last = false;
  int num_workers = 0;
  int prefetch_factor = 2;
  bool pin_memory = false;
  // With workers: how long Next() waits for one batch before failing with
  // DeadlineExceeded (a hung dataset); 0 waits forever, as PyTorch's default.
  // A worker stuck inside Dataset::Get cannot be interrupted: StartEpoch and
  // the destructor still wait for it to return.
  double timeout_seconds = 0;
};

struct Batch {
  int64_t index = 0;             // Position of the batch in the epoch.
  std::vector<int64_t> indices;  // Dataset indices, in order.
  Tensor features;               // f32 [B, example_shape...] (a Dataset's)
  Tensor labels;                 // i64 [B] (a Dataset's)
  std::vector<Tensor> fields;    // what the collate step made (a Dataset's: features, labels)
};

class DataLoader {
 public:
  static absl::StatusOr<std::unique_ptr<DataLoader>> Create(std::shared_ptr<const Dataset> dataset,
                                                            std::shared_ptr<Sampler> sampler,
                                                            const DataLoaderOptions& options);
  // Over examples of any fields; `collate` null: StackExamples.
  static absl::StatusOr<std::unique_ptr<DataLoader>> Create(std::shared_ptr<const ExampleDataset> dataset,
                                                            std::shared_ptr<Sampler> sampler,
                                                            const DataLoaderOptions& options,
                                                            CollateFn collate = nullptr);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Batches per epoch (len(loader) in PyTorch).
  int64_t num_batches() const;

  // Starts epoch `epoch` at batch `first_batch` (0: the whole epoch), in
  // [0, num_batches()]; num_batches() gives an empty remainder.
  absl::Status StartEpoch(int64_t epoch, int64_t first_batch = 0);

  // The next batch, std::nullopt at the end of the epoch, or an error.
  absl::StatusOr<std::optional<Batch>> Next();

 private:
  DataLoader(std::shared_ptr<const ExampleDataset> dataset, std::shared_ptr<Sampler> sampler,
             const DataLoaderOptions& options, CollateFn collate, bool classification)
      : dataset_(std::move(dataset)),
        sampler_(std::move(sampler)),
        options_(options),
        collate_(std::move(collate)),
        classification_(classification) {}

  absl::StatusOr<Batch> MakeBatch(int64_t batch_index) const;
  void WorkerLoop();
  void StopWorkers();

  const std::shared_ptr<const ExampleDataset> dataset_;
  const std::shared_ptr<Sampler> sampler_;
  const DataLoaderOptions options_;
  const CollateFn collate_;    // null: StackExamples
  const bool classification_;  // made from a Dataset: fill features and labels

  // The current epoch; written only while no worker runs.
  std::vector<int64_t> order_;
  int64_t epoch_batches_ = 0;
  bool started_ = false;
  bool finished_ = false;  // End reached or an error returned.

  // Shared with workers, guarded by mu_ (std::mutex: TSan understands it).
  std::mutex mu_;
  std::condition_variable work_cv_;   // Workers wait for room or stop.
  std::condition_variable ready_cv_;  // Next() waits for its batch.
  int64_t next_to_make_ = 0;
  int64_t next_to_return_ = 0;
  bool stop_ = false;
  std::map<int64_t, absl::StatusOr<Batch>> ready_;
  std::vector<std::thread> workers_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_DATA_DATA_LOADER_H_
