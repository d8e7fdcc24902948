#include "data/data_loader.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace lockstep {

namespace {

absl::Status CheckOptions(const DataLoaderOptions& options);

}  // namespace

absl::StatusOr<std::unique_ptr<DataLoader>> DataLoader::Create(std::shared_ptr<const Dataset> dataset,
                                                               std::shared_ptr<Sampler> sampler,
                                                               const DataLoaderOptions& options) {
  if (dataset == nullptr || sampler == nullptr) {
    return absl::InvalidArgumentError("DataLoader: dataset and sampler are required");
  }
  LOCKSTEP_RETURN_IF_ERROR(CheckOptions(options));
  return std::unique_ptr<DataLoader>(
      new DataLoader(AsExamples(std::move(dataset)), std::move(sampler), options, nullptr, true));
}

absl::StatusOr<std::unique_ptr<DataLoader>> DataLoader::Create(std::shared_ptr<const ExampleDataset> dataset,
                                                               std::shared_ptr<Sampler> sampler,
                                                               const DataLoaderOptions& options, CollateFn collate) {
  if (dataset == nullptr || sampler == nullptr) {
    return absl::InvalidArgumentError("DataLoader: dataset and sampler are required");
  }
  LOCKSTEP_RETURN_IF_ERROR(CheckOptions(options));
  return std::unique_ptr<DataLoader>(
      new DataLoader(std::move(dataset), std::move(sampler), options, std::move(collate), false));
}

namespace {

absl::Status CheckOptions(const DataLoaderOptions& options) {
  if (options.batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DataLoader: batch_size = ", options.batch_size, "; it must be at least 1"));
  }
  if (options.num_workers < 0 || options.num_workers > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("DataLoader: num_workers = ", options.num_workers, "; use 0 (no threads) to 256"));
  }
  if (!(options.timeout_seconds >= 0)) {
    return absl::InvalidArgumentError("DataLoader: timeout_seconds must be >= 0");
  }
  if (options.num_workers > 0 && options.prefetch_factor < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DataLoader: prefetch_factor = ", options.prefetch_factor, "; it must be at least 1"));
  }
  return absl::OkStatus();
}

}  // namespace

DataLoader::~DataLoader() { StopWorkers(); }

int64_t DataLoader::num_batches() const {
  const int64_t n = sampler_->size();
  return options_.drop_last ? n / options_.batch_size : (n + options_.batch_size - 1) / options_.batch_size;
}

void DataLoader::StopWorkers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

absl::Status DataLoader::StartEpoch(int64_t epoch, int64_t first_batch) {
  if (first_batch < 0 || first_batch > num_batches()) {
    return absl::OutOfRangeError(absl::StrCat("DataLoader::StartEpoch: first_batch = ", first_batch, "; an epoch has ",
                                              num_batches(),
                                              " batches (was the checkpoint made with another batch "
                                              "size or world size?)"));
  }
  StopWorkers();
  sampler_->SetEpoch(epoch);
  order_ = sampler_->Indices();
  for (int64_t index : order_) {
    if (index < 0 || index >= dataset_->size()) {
      return absl::OutOfRangeError(absl::StrCat("DataLoader: the sampler gave index ", index, " for a dataset of ",
                                                dataset_->size(),
                                                " examples; was the sampler made for another dataset?"));
    }
  }
  epoch_batches_ = num_batches();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
    next_to_make_ = first_batch;
    next_to_return_ = first_batch;
    ready_.clear();
  }
  started_ = true;
  finished_ = false;
  for (int i = 0; i < options_.num_workers; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  return absl::OkStatus();
}

absl::StatusOr<Batch> DataLoader::MakeBatch(int64_t batch_index) const {
  const int64_t begin = batch_index * options_.batch_size;
  const int64_t end = std::min<int64_t>(begin + options_.batch_size, static_cast<int64_t>(order_.size()));
  Batch batch;
  batch.index = batch_index;
  batch.indices.assign(order_.begin() + begin, order_.begin() + end);
  absl::StatusOr<std::vector<Tensor>> fields = collate_ ? collate_(*dataset_, batch.indices, options_.pin_memory)
                                                        : StackExamples(*dataset_, batch.indices, options_.pin_memory);
  if (!fields.ok()) {
    return absl::Status(fields.status().code(), absl::StrCat("DataLoader: batch ", batch_index, ", ",
                                                             collate_ ? "collate: " : "", fields.status().message()));
  }
  batch.fields = *std::move(fields);
  if (classification_) {
    batch.features = batch.fields[0];
    batch.labels = batch.fields[1];
  }
  return batch;
}

void DataLoader::WorkerLoop() {
  const int64_t capacity = static_cast<int64_t>(options_.num_workers) * options_.prefetch_factor;
  while (true) {
    int64_t batch_index;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] {
        return stop_ || (next_to_make_ < epoch_batches_ && next_to_make_ - next_to_return_ < capacity);
      });
      if (stop_) return;
      batch_index = next_to_make_++;
    }
    absl::StatusOr<Batch> batch = MakeBatch(batch_index);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_.emplace(batch_index, std::move(batch));
    }
    ready_cv_.notify_all();
    if (batch_index + 1 >= epoch_batches_) {
      // Nothing left to make: wake the others so they can see it too.
      work_cv_.notify_all();
    }
  }
}

absl::StatusOr<std::optional<Batch>> DataLoader::Next() {
  if (!started_) {
    return absl::FailedPreconditionError("DataLoader::Next: call StartEpoch(epoch) first");
  }
  if (finished_) return std::optional<Batch>();
  if (options_.num_workers == 0) {
    if (next_to_return_ >= epoch_batches_) {
      finished_ = true;
      return std::optional<Batch>();
    }
    absl::StatusOr<Batch> batch = MakeBatch(next_to_return_++);
    if (!batch.ok()) {
      finished_ = true;
      return batch.status();
    }
    return std::optional<Batch>(*std::move(batch));
  }
  absl::StatusOr<Batch> batch;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (next_to_return_ >= epoch_batches_) {
      finished_ = true;
      return std::optional<Batch>();
    }
    auto has_batch = [&] { return ready_.count(next_to_return_) > 0; };
    if (options_.timeout_seconds > 0) {
      if (!ready_cv_.wait_for(lock, std::chrono::duration<double>(options_.timeout_seconds), has_batch)) {
        const int64_t late = next_to_return_;
        // Ask the workers to stop; one stuck inside Get() cannot be
        // interrupted, so it is joined (waited for) only by StartEpoch or
        // the destructor.
        stop_ = true;
        lock.unlock();
        work_cv_.notify_all();
        finished_ = true;
        return absl::DeadlineExceededError(
            absl::StrCat("DataLoader::Next: batch ", late, " was not ready after ", options_.timeout_seconds,
                         " s (timeout_seconds); a Dataset::Get call is stuck or very slow"));
      }
    } else {
      ready_cv_.wait(lock, has_batch);
    }
    auto it = ready_.find(next_to_return_);
    batch = std::move(it->second);
    ready_.erase(it);
    ++next_to_return_;
  }
  work_cv_.notify_all();  // Room for one more batch.
  if (!batch.ok()) {
    finished_ = true;
    StopWorkers();
    return batch.status();
  }
  return std::optional<Batch>(*std::move(batch));
}

}  // namespace lockstep
