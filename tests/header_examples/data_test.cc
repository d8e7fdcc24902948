// The usage examples of data's public headers, compiled and run. Each
// example's lines appear below exactly as in its header (checked by
// //tests:header_examples_check); lines in between set up its inputs or check
// its results.
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/status.h"
#include "core/tensor.h"
#include "data/char_corpus.h"
#include "data/data_loader.h"
#include "data/dataset.h"
#include "data/distributed_sampler.h"
#include "data/elastic_sampler.h"
#include "data/example_dataset.h"
#include "data/idx.h"
#include "data/idx_dataset.h"
#include "data/normalize.h"
#include "data/randperm.h"
#include "data/sampler.h"
#include "data/synthetic_dataset.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

std::shared_ptr<SyntheticDataset> SmallDataset(int64_t size) {
  SyntheticOptions options;
  options.size = size;
  options.example_shape = {1, 4, 4};
  options.num_classes = 3;
  return *SyntheticDataset::Create(options);
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

bool IsPermutation(std::vector<int64_t> v, int64_t n) {
  std::sort(v.begin(), v.end());
  return v == Iota(n);
}

// data/data_loader.h
struct Seen {
  std::vector<std::vector<int64_t>> batch_sizes;  // [epoch] -> rows per batch
  std::vector<std::vector<int64_t>> labels;       // [epoch] -> every label, in order
};

absl::Status DataLoaderExample(std::shared_ptr<const Dataset> dataset, std::shared_ptr<Sampler> sampler,
                               int64_t epochs, Seen* seen) {
  int64_t current = 0;
  auto Train = [&](const Tensor& features, const Tensor& labels) {
    seen->batch_sizes[current].push_back(features.shape()[0]);
    const std::vector<int64_t> values = *labels.ToVector<int64_t>();
    seen->labels[current].insert(seen->labels[current].end(), values.begin(), values.end());
  };
  seen->batch_sizes.resize(epochs);
  seen->labels.resize(epochs);
  DataLoaderOptions options;
  options.batch_size = 128;
  options.num_workers = 2;          // 0: batches are made in Next() itself
  LOCKSTEP_ASSIGN_OR_RETURN(auto loader, DataLoader::Create(dataset, sampler, options));
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    current = epoch;
    LOCKSTEP_RETURN_IF_ERROR(loader->StartEpoch(epoch));  // calls sampler->SetEpoch(epoch)
    while (true) {
      LOCKSTEP_ASSIGN_OR_RETURN(std::optional<Batch> batch, loader->Next());
      if (!batch) break;             // end of epoch
      if (batch->features.shape() != Shape({batch->labels.numel(), 1, 4, 4})) {
        return absl::InternalError("features " + ShapeToString(batch->features.shape()));
      }
      Train(batch->features, batch->labels);
    }
  }
  return absl::OkStatus();
}

TEST(DataExamplesTest, DataLoaderBatchesEveryEpochInSamplerOrder) {
  std::shared_ptr<SyntheticDataset> dataset = SmallDataset(300);
  auto sampler = std::make_shared<RandomSampler>(300, /*seed=*/5);
  Seen seen;
  const absl::Status s = DataLoaderExample(dataset, sampler, 2, &seen);
  ASSERT_TRUE(s.ok()) << s;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    EXPECT_EQ(seen.batch_sizes[epoch], (std::vector<int64_t>{128, 128, 44})) << epoch;
    sampler->SetEpoch(epoch);
    std::vector<int64_t> want;
    for (int64_t i : sampler->Indices()) want.push_back(dataset->Label(i));
    EXPECT_EQ(seen.labels[epoch], want) << epoch;
  }
}

// data/dataset.h
absl::Status DatasetExample(std::shared_ptr<const Dataset> dataset, std::vector<float>* features,
                            int64_t* label) {
  const Dataset& d = *dataset;
  std::vector<float> x(d.example_numel());
  int64_t y;
  LOCKSTEP_RETURN_IF_ERROR(d.Get(17, absl::MakeSpan(x), &y));
  *features = x;
  *label = y;
  return absl::OkStatus();
}

TEST(DataExamplesTest, DatasetGetFillsOneExample) {
  std::shared_ptr<SyntheticDataset> dataset = SmallDataset(20);
  std::vector<float> x;
  int64_t y = -1;
  const absl::Status s = DatasetExample(dataset, &x, &y);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(x.size(), 16u);
  EXPECT_EQ(y, dataset->Label(17));
  std::vector<float> again(16);
  int64_t y2;
  ASSERT_TRUE(dataset->Get(17, absl::MakeSpan(again), &y2).ok());
  EXPECT_EQ(x, again);
  EXPECT_FALSE(SmallDataset(10)->Get(17, absl::MakeSpan(again), &y2).ok());  // out of range
}

// data/example_dataset.h
absl::StatusOr<int64_t> ExampleDatasetExample(std::shared_ptr<const Dataset> dataset,
                                              std::shared_ptr<Sampler> sampler, const DataLoaderOptions& options) {
  std::shared_ptr<const ExampleDataset> examples = AsExamples(dataset);  // features, label
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<Tensor> batch, StackExamples(*examples, {4, 0, 7}, false));
  // batch[0]: f32 [3, example_shape...], batch[1]: i64 [3]
  LOCKSTEP_ASSIGN_OR_RETURN(auto loader, DataLoader::Create(examples, sampler, options));
  EXPECT_EQ(batch[0].shape(), (std::vector<int64_t>{3, 1, 4, 4}));
  EXPECT_EQ(batch[1].shape(), (std::vector<int64_t>{3}));
  return loader->num_batches();
}

TEST(DataExamplesTest, ExampleDatasetStacksFields) {
  std::shared_ptr<SyntheticDataset> dataset = SmallDataset(10);
  DataLoaderOptions options;
  options.batch_size = 4;
  absl::StatusOr<int64_t> batches =
      ExampleDatasetExample(dataset, std::make_shared<SequentialSampler>(10), options);
  ASSERT_TRUE(batches.ok()) << batches.status();
  EXPECT_EQ(*batches, 3);
}

// data/char_corpus.h
absl::StatusOr<std::string> CharCorpusExample() {
  CharCorpusOptions options;            // the fortunes folder, context 128
  LOCKSTEP_ASSIGN_OR_RETURN(CharCorpus corpus, CharCorpus::Load(options));
  std::vector<int64_t> input(options.context), target(options.context);
  LOCKSTEP_RETURN_IF_ERROR(corpus.GetWindow(CorpusSplit::kTrain, 0, absl::MakeSpan(input),
                                            absl::MakeSpan(target)));
  LOCKSTEP_ASSIGN_OR_RETURN(std::string text, corpus.vocabulary().Decode(input));
  return text;
}

TEST(DataExamplesTest, CharCorpusReadsTheFortunes) {
  struct stat st {};
  if (::stat(kDefaultFortunesDir, &st) != 0) GTEST_SKIP() << kDefaultFortunesDir << " missing (apt-get install fortunes)";
  absl::StatusOr<std::string> text = CharCorpusExample();
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->size(), 128u);
  EXPECT_EQ(text->rfind("7:30, Channel 5: The Bionic Dog", 0), 0u) << *text;  // the first fortune of "art"
}

// data/distributed_sampler.h
absl::StatusOr<std::vector<std::vector<int64_t>>> DistributedSamplerExample(const Dataset& dataset, int rank,
                                                                            int world_size, int64_t epochs) {
  std::vector<std::vector<int64_t>> seen(epochs);
  DistributedSamplerOptions options;
  options.num_replicas = world_size;
  options.rank = rank;
  LOCKSTEP_ASSIGN_OR_RETURN(DistributedSampler sampler,
                            DistributedSampler::Create(dataset.size(), options));
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    sampler.SetEpoch(epoch);   // else every epoch has the same order
    for (int64_t i : sampler.Indices()) seen[epoch].push_back(i);
  }
  return seen;
}

// data/elastic_sampler.h: 4 ranks read 5 steps of 32 of 1000 examples,
// then rank `new_rank` of the 3 left reads its share of the rest.
absl::StatusOr<std::vector<int64_t>> ElasticSamplerExample(const Dataset& dataset, int64_t new_rank) {
  DistributedSamplerOptions options;
  options.num_replicas = 4;
  options.rank = 0;
  const int64_t epoch = 1;
  LOCKSTEP_ASSIGN_OR_RETURN(ElasticSampler sampler, ElasticSampler::Create(dataset.size(), options));
  sampler.SetEpoch(epoch);
  static_cast<void>(sampler.Indices());  // 5 steps of 32 per rank on 4 ranks; then a rank is lost
  LOCKSTEP_RETURN_IF_ERROR(sampler.Reshard(/*consumed=*/5 * 32 * 4, /*world=*/3, /*rank=*/new_rank));
  std::vector<int64_t> mine = sampler.Indices();  // this rank's share of what is left
  return mine;
}

TEST(DataExamplesTest, ElasticSamplerDealsTheRestToTheSurvivors) {
  std::shared_ptr<SyntheticDataset> dataset = SmallDataset(1000);
  std::vector<int64_t> rest;
  for (int64_t r = 0; r < 3; ++r) {
    absl::StatusOr<std::vector<int64_t>> mine = ElasticSamplerExample(*dataset, r);
    ASSERT_TRUE(mine.ok()) << mine.status();
    EXPECT_EQ(mine->size(), 120u);  // 1000 - 5 x 32 x 4 = 360 left, over 3 ranks
    rest.insert(rest.end(), mine->begin(), mine->end());
  }
  std::sort(rest.begin(), rest.end());
  EXPECT_EQ(std::unique(rest.begin(), rest.end()), rest.end());  // each once
}

TEST(DataExamplesTest, DistributedSamplerShardsEachEpoch) {
  std::shared_ptr<SyntheticDataset> dataset = SmallDataset(10);
  absl::StatusOr<std::vector<std::vector<int64_t>>> rank0 = DistributedSamplerExample(*dataset, 0, 2, 2);
  absl::StatusOr<std::vector<std::vector<int64_t>>> rank1 = DistributedSamplerExample(*dataset, 1, 2, 2);
  ASSERT_TRUE(rank0.ok()) << rank0.status();
  ASSERT_TRUE(rank1.ok()) << rank1.status();
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int64_t> both = (*rank0)[epoch];
    EXPECT_EQ(both.size(), 5u);
    both.insert(both.end(), (*rank1)[epoch].begin(), (*rank1)[epoch].end());
    EXPECT_TRUE(IsPermutation(both, 10)) << epoch;  // disjoint shards covering the dataset
  }
  EXPECT_NE((*rank0)[0], (*rank0)[1]);  // SetEpoch reshuffles
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// data/idx.h: reads Debian's Fashion-MNIST (dataset-fashion-mnist); skipped
// where it is not installed. The example names fields as statements.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-value"
absl::StatusOr<IdxArray> IdxExample() {
  LOCKSTEP_ASSIGN_OR_RETURN(IdxArray images,
      ReadIdxFile("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"));
  images.dims;   // {60000, 28, 28}
  images.data;   // 47,040,000 bytes, host byte order
  return images;
}
#pragma GCC diagnostic pop

TEST(DataExamplesTest, IdxReadsFashionMnistImages) {
  if (!Exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)";
  }
  absl::StatusOr<IdxArray> images = IdxExample();
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(images->type, IdxType::kU8);
  EXPECT_EQ(images->dims, (std::vector<int64_t>{60000, 28, 28}));
  EXPECT_EQ(images->data.size(), 47040000u);
}

// data/idx_dataset.h: the same files.
absl::StatusOr<std::shared_ptr<IdxDataset>> IdxDatasetExample() {
  LOCKSTEP_ASSIGN_OR_RETURN(std::shared_ptr<IdxDataset> train,
                            LoadFashionMnist(kDefaultFashionMnistDir, Split::kTrain));
  train->size();           // 60000
  train->example_shape();  // {1, 28, 28}
  return train;
}

TEST(DataExamplesTest, IdxDatasetLoadsFashionMnist) {
  if (!Exists(std::string(kDefaultFashionMnistDir) + "/train-labels-idx1-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)";
  }
  absl::StatusOr<std::shared_ptr<IdxDataset>> train = IdxDatasetExample();
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ((*train)->size(), 60000);
  EXPECT_EQ((*train)->example_shape(), (std::vector<int64_t>{1, 28, 28}));
  EXPECT_EQ((*train)->num_classes(), 10);
  std::vector<float> x(784);
  int64_t y;
  ASSERT_TRUE((*train)->Get(0, absl::MakeSpan(x), &y).ok());
  EXPECT_EQ(y, (*train)->labels()[0]);
  EXPECT_FLOAT_EQ(x[400], (*train)->pixels()[400] / 255.0f);
}

// data/normalize.h
absl::StatusOr<std::shared_ptr<Normalize>> NormalizeExample(std::shared_ptr<const Dataset> train) {
  // Fashion-MNIST's usual statistics:
  LOCKSTEP_ASSIGN_OR_RETURN(auto normalized,
      Normalize::Create(train, /*mean=*/{0.2860f}, /*std=*/{0.3530f}));
  return normalized;
}

TEST(DataExamplesTest, NormalizeAppliesMeanAndStd) {
  std::shared_ptr<SyntheticDataset> train = SmallDataset(4);
  absl::StatusOr<std::shared_ptr<Normalize>> normalized = NormalizeExample(train);
  ASSERT_TRUE(normalized.ok()) << normalized.status();
  std::vector<float> raw(16), norm(16);
  int64_t y1, y2;
  ASSERT_TRUE(train->Get(2, absl::MakeSpan(raw), &y1).ok());
  ASSERT_TRUE((*normalized)->Get(2, absl::MakeSpan(norm), &y2).ok());
  EXPECT_EQ(y1, y2);
  for (size_t i = 0; i < raw.size(); ++i) EXPECT_NEAR(norm[i], (raw[i] - 0.2860f) / 0.3530f, 1e-5) << i;
}

// data/randperm.h
TEST(DataExamplesTest, TorchRandpermMatchesPyTorch) {
  absl::StatusOr<std::vector<int64_t>> p = TorchRandperm(10, /*seed=*/0);

  ASSERT_TRUE(p.ok()) << p.status();
  // torch.randperm(10, generator=torch.Generator().manual_seed(0)), PyTorch 1.13.
  EXPECT_EQ(*p, (std::vector<int64_t>{4, 1, 7, 5, 3, 9, 0, 8, 6, 2}));
}

// data/sampler.h
TEST(DataExamplesTest, SequentialAndRandomSamplers) {
  const int64_t n = 50;
  SequentialSampler seq(n);             // 0, 1, ..., n-1
  RandomSampler rnd(n, /*seed=*/7);     // a permutation, new each epoch
  std::vector<int64_t> first = rnd.Indices();
  rnd.SetEpoch(3);
  std::vector<int64_t> order = rnd.Indices();

  EXPECT_EQ(seq.Indices(), Iota(n));
  EXPECT_TRUE(IsPermutation(order, n));
  EXPECT_TRUE(IsPermutation(first, n));
  EXPECT_NE(order, first);
  EXPECT_EQ(rnd.Indices(), order);  // deterministic for an epoch
}

// data/synthetic_dataset.h
absl::StatusOr<std::shared_ptr<SyntheticDataset>> SyntheticExample() {
  SyntheticOptions options;            // 60000 examples of {1, 28, 28}, 10 classes
  options.seed = 3;
  LOCKSTEP_ASSIGN_OR_RETURN(auto data, SyntheticDataset::Create(options));
  return data;
}

TEST(DataExamplesTest, SyntheticDatasetIsDeterministic) {
  absl::StatusOr<std::shared_ptr<SyntheticDataset>> data = SyntheticExample();
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ((*data)->size(), 60000);
  EXPECT_EQ((*data)->example_shape(), (std::vector<int64_t>{1, 28, 28}));
  EXPECT_EQ((*data)->num_classes(), 10);
  std::vector<float> a(784), b(784);
  int64_t ya, yb;
  ASSERT_TRUE((*data)->Get(123, absl::MakeSpan(a), &ya).ok());
  ASSERT_TRUE((*SyntheticExample())->Get(123, absl::MakeSpan(b), &yb).ok());
  EXPECT_EQ(a, b);
  EXPECT_EQ(ya, yb);
  std::set<int64_t> labels;
  for (int64_t i = 0; i < 100; ++i) labels.insert((*data)->Label(i));
  EXPECT_EQ(labels.size(), 10u);
}

}  // namespace
}  // namespace lockstep
