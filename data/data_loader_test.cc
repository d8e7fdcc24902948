#include "data/data_loader.h"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <set>
#include <vector>

#include "data/distributed_sampler.h"
#include "data/synthetic_dataset.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

std::shared_ptr<SyntheticDataset> Data(int64_t n, std::vector<int64_t> shape = {3, 4}) {
  SyntheticOptions o;
  o.size = n;
  o.example_shape = shape;
  return *SyntheticDataset::Create(o);
}

std::vector<Batch> Epoch(DataLoader& loader, int64_t epoch) {
  EXPECT_TRUE(loader.StartEpoch(epoch).ok());
  std::vector<Batch> out;
  while (true) {
    absl::StatusOr<std::optional<Batch>> b = loader.Next();
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok() || !*b) break;
    out.push_back(**std::move(b));
  }
  return out;
}

void ExpectSameBatches(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].index, static_cast<int64_t>(k));
    EXPECT_EQ(a[k].indices, b[k].indices);
    ASSERT_EQ(a[k].features.shape(), b[k].features.shape());
    EXPECT_EQ(std::memcmp(a[k].features.raw_data(), b[k].features.raw_data(), a[k].features.nbytes()), 0);
    EXPECT_EQ(*a[k].labels.ToVector<int64_t>(), *b[k].labels.ToVector<int64_t>());
  }
}

TEST(DataLoaderTest, BatchesHoldTheSamplersExamplesInOrder) {
  auto data = Data(10);
  auto sampler = std::make_shared<RandomSampler>(10, 3);
  DataLoaderOptions o;
  o.batch_size = 4;
  auto loader = *DataLoader::Create(data, sampler, o);
  EXPECT_EQ(loader->num_batches(), 3);
  const std::vector<Batch> batches = Epoch(*loader, 2);
  sampler->SetEpoch(2);
  const std::vector<int64_t> order = sampler->Indices();
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[2].features.shape(), (Shape{2, 3, 4}));  // The short last batch.
  std::vector<float> x(12);
  for (size_t k = 0; k < batches.size(); ++k) {
    for (int64_t i = 0; i < batches[k].labels.numel(); ++i) {
      const int64_t index = order[k * 4 + i];
      EXPECT_EQ(batches[k].indices[i], index);
      int64_t y;
      ASSERT_TRUE(data->Get(index, absl::MakeSpan(x), &y).ok());
      EXPECT_EQ(batches[k].labels.data<int64_t>()[i], y);
      EXPECT_EQ(std::memcmp(batches[k].features.data<float>() + i * 12, x.data(), 48), 0);
    }
  }
}

TEST(DataLoaderTest, OrderIsIndependentOfWorkerCount) {
  auto data = Data(203);
  auto reference_loader =
      *DataLoader::Create(data, std::make_shared<RandomSampler>(203, 1), DataLoaderOptions{16, false, 0, 2, false});
  const std::vector<Batch> reference = Epoch(*reference_loader, 5);
  for (int workers : {1, 2, 4, 7}) {
    for (int prefetch : {1, 2, 3}) {
      auto loader = *DataLoader::Create(data, std::make_shared<RandomSampler>(203, 1),
                                        DataLoaderOptions{16, false, workers, prefetch, false});
      ExpectSameBatches(Epoch(*loader, 5), reference);
      // A second epoch on the same loader reshuffles identically too.
      ExpectSameBatches(Epoch(*loader, 6), Epoch(*reference_loader, 6));
    }
  }
}

TEST(DataLoaderTest, EverySampleExactlyOnceAcrossDistributedRanks) {
  auto data = Data(101);
  std::multiset<int64_t> seen;
  for (int64_t rank = 0; rank < 3; ++rank) {
    auto sampler = std::make_shared<DistributedSampler>(*DistributedSampler::Create(101, {3, rank, true, 0, false}));
    auto loader = *DataLoader::Create(data, sampler, DataLoaderOptions{8, false, 2, 2, false});
    for (const Batch& b : Epoch(*loader, 0)) seen.insert(b.indices.begin(), b.indices.end());
  }
  // 101 = 3 * 34 - 1: one index is repeated as padding, every index appears.
  EXPECT_EQ(seen.size(), 102u);
  for (int64_t i = 0; i < 101; ++i) EXPECT_GE(seen.count(i), 1u) << i;
}

TEST(DataLoaderTest, StartEpochAtBatchKContinuesTheSameOrder) {
  auto data = Data(203);
  for (int workers : {0, 2}) {
    auto full_loader = *DataLoader::Create(data, std::make_shared<RandomSampler>(203, 4),
                                           DataLoaderOptions{16, false, workers, 2, false});
    const std::vector<Batch> full = Epoch(*full_loader, 3);
    ASSERT_EQ(full.size(), 13u);
    // A fresh loader, as a resumed process has: its first epoch starts at batch k.
    for (int64_t k : {1, 5, 12, 13}) {
      auto loader = *DataLoader::Create(data, std::make_shared<RandomSampler>(203, 4),
                                        DataLoaderOptions{16, false, workers, 2, false});
      ASSERT_TRUE(loader->StartEpoch(3, k).ok());
      std::vector<Batch> rest;
      while (true) {
        absl::StatusOr<std::optional<Batch>> b = loader->Next();
        ASSERT_TRUE(b.ok()) << b.status();
        if (!*b) break;
        rest.push_back(**std::move(b));
      }
      ASSERT_EQ(rest.size(), full.size() - k) << "k=" << k << " workers=" << workers;
      for (size_t i = 0; i < rest.size(); ++i) {
        EXPECT_EQ(rest[i].index, full[k + i].index);
        EXPECT_EQ(rest[i].indices, full[k + i].indices);
        EXPECT_EQ(
            std::memcmp(rest[i].features.raw_data(), full[k + i].features.raw_data(), full[k + i].features.nbytes()),
            0);
      }
      // The next epoch is whole again.
      const std::vector<Batch> next = Epoch(*loader, 4);
      EXPECT_EQ(next.size(), 13u);
    }
  }
}

TEST(DataLoaderTest, StartEpochRejectsABatchOutsideTheEpoch) {
  auto loader =
      *DataLoader::Create(Data(10), std::make_shared<SequentialSampler>(10), DataLoaderOptions{4, false, 0, 2, false});
  EXPECT_EQ(loader->StartEpoch(0, -1).code(), absl::StatusCode::kOutOfRange);
  const absl::Status s = loader->StartEpoch(0, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("3 batches"), std::string::npos) << s;
}

TEST(DataLoaderTest, DropLastDropsTheShortBatch) {
  auto loader =
      *DataLoader::Create(Data(10), std::make_shared<SequentialSampler>(10), DataLoaderOptions{4, true, 2, 2, false});
  EXPECT_EQ(loader->num_batches(), 2);
  const std::vector<Batch> batches = Epoch(*loader, 0);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[1].indices, (std::vector<int64_t>{4, 5, 6, 7}));
}

// Forwards everything to a base dataset; the test datasets below override Get.
class ForwardingDataset : public Dataset {
 public:
  explicit ForwardingDataset(std::shared_ptr<Dataset> base) : base_(std::move(base)) {}
  int64_t size() const override { return base_->size(); }
  std::vector<int64_t> example_shape() const override { return base_->example_shape(); }
  int64_t num_classes() const override { return base_->num_classes(); }
  absl::Status Get(int64_t index, absl::Span<float> f, int64_t* label) const override {
    return base_->Get(index, f, label);
  }

 private:
  std::shared_ptr<Dataset> base_;
};

// Fails on one index, to check that worker errors reach the consumer.
class FailingDataset : public ForwardingDataset {
 public:
  FailingDataset(std::shared_ptr<Dataset> base, int64_t bad) : ForwardingDataset(std::move(base)), bad_(bad) {}
  absl::Status Get(int64_t index, absl::Span<float> f, int64_t* label) const override {
    if (index == bad_) return absl::DataLossError("disk read failed for record 13");
    return ForwardingDataset::Get(index, f, label);
  }

 private:
  int64_t bad_;
};

TEST(DataLoaderTest, WorkerErrorsSurfaceWithTheirCause) {
  for (int workers : {0, 1, 3}) {
    auto data = std::make_shared<FailingDataset>(Data(40), 13);
    auto loader = *DataLoader::Create(data, std::make_shared<SequentialSampler>(40),
                                      DataLoaderOptions{5, false, workers, 2, false});
    ASSERT_TRUE(loader->StartEpoch(0).ok());
    for (int k = 0; k < 2; ++k) ASSERT_TRUE(loader->Next().ok());     // Batches 0, 1.
    const absl::StatusOr<std::optional<Batch>> bad = loader->Next();  // Batch 2 holds 13.
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(bad.status().message().find("batch 2, example 13: disk read failed for record 13"),
              absl::string_view::npos)
        << bad.status();
    const auto after = loader->Next();
    ASSERT_TRUE(after.ok());
    EXPECT_FALSE(after->has_value());         // The epoch ended.
    ASSERT_TRUE(loader->StartEpoch(1).ok());  // A new epoch starts cleanly.
    EXPECT_TRUE(loader->Next().ok());
  }
}

TEST(DataLoaderTest, StopsCleanlyMidEpoch) {
  auto data = Data(1000, {64});
  for (int round = 0; round < 20; ++round) {
    auto loader = *DataLoader::Create(data, std::make_shared<RandomSampler>(1000, round),
                                      DataLoaderOptions{7, false, 4, 3, false});
    ASSERT_TRUE(loader->StartEpoch(0).ok());
    ASSERT_TRUE(loader->Next().ok());
    if (round % 2 == 0) {
      ASSERT_TRUE(loader->StartEpoch(1).ok());  // Restart mid-epoch.
    }
    // The destructor stops and joins the workers with batches in flight.
  }
}

// Records how far ahead of the consumer the workers run.
class WatchedDataset : public ForwardingDataset {
 public:
  using ForwardingDataset::ForwardingDataset;
  absl::Status Get(int64_t index, absl::Span<float> f, int64_t* label) const override {
    const int64_t ahead = index - consumed.load();
    int64_t seen = max_ahead.load();
    while (ahead > seen && !max_ahead.compare_exchange_weak(seen, ahead)) {
    }
    return ForwardingDataset::Get(index, f, label);
  }
  mutable std::atomic<int64_t> consumed{0};
  mutable std::atomic<int64_t> max_ahead{0};
};

TEST(DataLoaderTest, PrefetchIsBounded) {
  auto data = std::make_shared<WatchedDataset>(Data(300, {8}));
  auto loader =
      *DataLoader::Create(data, std::make_shared<SequentialSampler>(300), DataLoaderOptions{1, false, 2, 2, false});
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  while (true) {
    auto b = loader->Next();
    ASSERT_TRUE(b.ok());
    if (!*b) break;
    data->consumed.store((*b)->index + 1);
  }
  // Batch i may start once batch i - capacity has been handed out (+1 for the
  // moment between the loader's and this test's bookkeeping).
  EXPECT_LE(data->max_ahead.load(), 2 * 2 + 1);
}

// Blocks Get(index 0) until released: a stuck dataset.
class StuckDataset : public ForwardingDataset {
 public:
  using ForwardingDataset::ForwardingDataset;
  absl::Status Get(int64_t index, absl::Span<float> f, int64_t* label) const override {
    if (index == 0) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return released_; });
    }
    return ForwardingDataset::Get(index, f, label);
  }
  void Release() const {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable bool released_ = false;
};

TEST(DataLoaderTest, TimeoutReportsAStuckDataset) {
  auto data = std::make_shared<StuckDataset>(Data(10));
  DataLoaderOptions o{2, false, 2, 2, false};
  o.timeout_seconds = 0.2;
  auto loader = *DataLoader::Create(data, std::make_shared<SequentialSampler>(10), o);
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  const auto r = loader->Next();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(r.status().message().find("batch 0 was not ready"), absl::string_view::npos) << r.status();
  data->Release();  // Lets the destructor join the stuck worker.
}

TEST(DataLoaderTest, PinMemoryFallsBackWithoutAGpu) {
  auto loader = *DataLoader::Create(Data(4), std::make_shared<SequentialSampler>(4),
                                    DataLoaderOptions{2, false, 1, 2, /*pin_memory=*/true});
  const std::vector<Batch> batches = Epoch(*loader, 0);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0].features.is_pinned(), cuda::DeviceCount() > 0);
}

TEST(DataLoaderTest, BadUseIsAnError) {
  auto data = Data(4);
  auto sampler = std::make_shared<SequentialSampler>(4);
  EXPECT_FALSE(DataLoader::Create(data, sampler, DataLoaderOptions{0, false, 0, 2, false}).ok());
  EXPECT_FALSE(DataLoader::Create(data, sampler, DataLoaderOptions{1, false, -1, 2, false}).ok());
  EXPECT_FALSE(DataLoader::Create(data, sampler, DataLoaderOptions{1, false, 2, 0, false}).ok());
  EXPECT_FALSE(DataLoader::Create(std::shared_ptr<const Dataset>(), sampler, DataLoaderOptions{}).ok());
  auto loader = *DataLoader::Create(data, sampler, DataLoaderOptions{});
  EXPECT_EQ(loader->Next().status().code(), absl::StatusCode::kFailedPrecondition);
  // A sampler for a larger dataset.
  auto wrong = *DataLoader::Create(data, std::make_shared<SequentialSampler>(9), DataLoaderOptions{});
  const absl::Status s = wrong->StartEpoch(0);
  EXPECT_NE(s.message().find("index 4 for a dataset of 4"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace lockstep
