// ExampleDataset, StackExamples and the DataLoader over examples of several
// fields: the same index order, workers and resume as over a Dataset.
#include "data/example_dataset.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "data/data_loader.h"
#include "data/distributed_sampler.h"
#include "data/synthetic_dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

// Example i: "tokens" i64 [3] = {10i, 10i + 1, 10i + 2}, "weight" f32
// scalar = i / 2, "ids" i32 [2, 2] = {i, -i, 2i, -2i}. Example `bad`
// fails.
class Toy final : public ExampleDataset {
 public:
  explicit Toy(int64_t n, int64_t bad = -1) : n_(n), bad_(bad) {}
  int64_t size() const override { return n_; }
  std::vector<ExampleField> fields() const override {
    return {{"tokens", DType::kI64, {3}}, {"weight", DType::kF32, {}}, {"ids", DType::kI32, {2, 2}}};
  }
  absl::Status Get(int64_t index, absl::Span<const absl::Span<char>> out) const override {
    if (absl::Status s = CheckExampleArgs(*this, "Toy", index, out); !s.ok()) return s;
    if (index == bad_) return absl::DataLossError("unreadable record");
    const int64_t tokens[3] = {10 * index, 10 * index + 1, 10 * index + 2};
    const float weight = static_cast<float>(index) / 2;
    const int32_t i = static_cast<int32_t>(index);
    const int32_t ids[4] = {i, -i, 2 * i, -2 * i};
    std::memcpy(out[0].data(), tokens, sizeof(tokens));
    std::memcpy(out[1].data(), &weight, sizeof(weight));
    std::memcpy(out[2].data(), ids, sizeof(ids));
    return absl::OkStatus();
  }

 private:
  int64_t n_, bad_;
};

void ExpectRows(const std::vector<Tensor>& fields, const std::vector<int64_t>& indices) {
  ASSERT_EQ(fields.size(), 3u);
  const int64_t b = static_cast<int64_t>(indices.size());
  EXPECT_EQ(fields[0].shape(), (std::vector<int64_t>{b, 3}));
  EXPECT_EQ(fields[1].shape(), (std::vector<int64_t>{b}));
  EXPECT_EQ(fields[2].shape(), (std::vector<int64_t>{b, 2, 2}));
  EXPECT_EQ(fields[0].dtype(), DType::kI64);
  EXPECT_EQ(fields[1].dtype(), DType::kF32);
  EXPECT_EQ(fields[2].dtype(), DType::kI32);
  for (int64_t r = 0; r < b; ++r) {
    const int64_t i = indices[r];
    for (int j = 0; j < 3; ++j) EXPECT_EQ(fields[0].data<int64_t>()[r * 3 + j], 10 * i + j);
    EXPECT_EQ(fields[1].data<float>()[r], static_cast<float>(i) / 2);
    EXPECT_EQ(fields[2].data<int32_t>()[r * 4 + 3], -2 * i);
  }
}

TEST(ExampleDatasetTest, StackExamplesStacksEachFieldInIndexOrder) {
  Toy toy(10);
  const std::vector<int64_t> indices = {7, 2, 9};
  absl::StatusOr<std::vector<Tensor>> batch = StackExamples(toy, indices, false);
  ASSERT_TRUE(batch.ok()) << batch.status();
  ExpectRows(*batch, indices);
  absl::StatusOr<std::vector<Tensor>> empty = StackExamples(toy, {}, false);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ((*empty)[0].shape(), (std::vector<int64_t>{0, 3}));
  Toy bad(10, 2);
  EXPECT_EQ(StackExamples(bad, indices, false).status().message(), "example 2: unreadable record");
}

TEST(ExampleDatasetTest, CheckExampleArgsNamesWhatWasExpected) {
  Toy toy(4);
  std::vector<char> a(24), b(4), c(15);
  std::vector<absl::Span<char>> out = {absl::MakeSpan(a), absl::MakeSpan(b), absl::MakeSpan(c)};
  EXPECT_THAT(CheckExampleArgs(toy, "Toy", 1, out).message(),
              HasSubstr("example 1 needs 3 buffers of bytes [tokens 24, weight 4, ids 16]; got [24, 4, 15]"));
  EXPECT_EQ(CheckExampleArgs(toy, "Toy", 4, out).code(), absl::StatusCode::kOutOfRange);
  out.pop_back();
  EXPECT_EQ(CheckExampleArgs(toy, "Toy", 0, out).code(), absl::StatusCode::kInvalidArgument);
}

std::shared_ptr<DistributedSampler> Sampler(int64_t n, int rank) {
  DistributedSamplerOptions o;
  o.num_replicas = 2;
  o.rank = rank;
  o.seed = 3;
  return std::make_shared<DistributedSampler>(*DistributedSampler::Create(n, o));
}

// The batches' indices over examples equal those over a classification
// Dataset of the same size, for every worker count, and resuming at batch k
// gives the epoch's batches from k on.
TEST(ExampleDatasetTest, DataLoaderKeepsTheIndexOrderWorkersAndResume) {
  const int64_t n = 53;
  SyntheticOptions so;
  so.size = n;
  so.example_shape = {2};
  std::shared_ptr<SyntheticDataset> images = *SyntheticDataset::Create(so);
  for (int workers : {0, 3}) {
    DataLoaderOptions options;
    options.batch_size = 4;
    options.num_workers = workers;
    auto examples = *DataLoader::Create(std::make_shared<Toy>(n), Sampler(n, 1), options);
    auto classic = *DataLoader::Create(std::shared_ptr<const Dataset>(images), Sampler(n, 1), options);
    for (int64_t epoch : {0, 1}) {
      ASSERT_TRUE(examples->StartEpoch(epoch).ok());
      ASSERT_TRUE(classic->StartEpoch(epoch).ok());
      std::vector<std::vector<int64_t>> order;
      while (true) {
        absl::StatusOr<std::optional<Batch>> a = examples->Next();
        absl::StatusOr<std::optional<Batch>> b = classic->Next();
        ASSERT_TRUE(a.ok() && b.ok());
        ASSERT_EQ(a->has_value(), b->has_value());
        if (!a->has_value()) break;
        EXPECT_EQ((*a)->indices, (*b)->indices);
        ExpectRows((*a)->fields, (*a)->indices);
        EXPECT_FALSE((*a)->features.defined());
        ASSERT_EQ((*b)->fields.size(), 2u);  // a Dataset's: features and labels
        order.push_back((*a)->indices);
      }
      EXPECT_EQ(static_cast<int64_t>(order.size()), examples->num_batches());
      ASSERT_TRUE(examples->StartEpoch(epoch, 5).ok());
      for (size_t k = 5; k < order.size(); ++k) {
        absl::StatusOr<std::optional<Batch>> a = examples->Next();
        ASSERT_TRUE(a.ok() && a->has_value());
        EXPECT_EQ((*a)->index, static_cast<int64_t>(k));
        EXPECT_EQ((*a)->indices, order[k]);
      }
    }
  }
}

TEST(ExampleDatasetTest, DataLoaderTakesACollateStepAndNamesFailures) {
  DataLoaderOptions options;
  options.batch_size = 3;
  // A collate step of its own: the batch's tokens summed per example.
  CollateFn sum = [](const ExampleDataset& d, absl::Span<const int64_t> indices,
                     bool pinned) -> absl::StatusOr<std::vector<Tensor>> {
    absl::StatusOr<std::vector<Tensor>> stacked = StackExamples(d, indices, pinned);
    if (!stacked.ok()) return stacked.status();
    std::vector<int64_t> sums;
    for (size_t r = 0; r < indices.size(); ++r) {
      const int64_t* t = (*stacked)[0].data<int64_t>() + 3 * r;
      sums.push_back(t[0] + t[1] + t[2]);
    }
    absl::StatusOr<Tensor> out = Tensor::FromVector<int64_t>(sums);
    if (!out.ok()) return out.status();
    return std::vector<Tensor>{*std::move(out)};
  };
  auto seq = std::make_shared<SequentialSampler>(7);
  auto loader = *DataLoader::Create(std::make_shared<Toy>(7), seq, options, sum);
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  absl::StatusOr<std::optional<Batch>> first = loader->Next();
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status();
  EXPECT_EQ(*(*first)->fields[0].ToVector<int64_t>(), (std::vector<int64_t>{3, 33, 63}));

  auto failing = *DataLoader::Create(std::make_shared<Toy>(7, 4), seq, options, sum);
  ASSERT_TRUE(failing->StartEpoch(0).ok());
  ASSERT_TRUE(failing->Next().ok());
  EXPECT_EQ(failing->Next().status().message(), "DataLoader: batch 1, collate: example 4: unreadable record");
  auto plain = *DataLoader::Create(std::make_shared<Toy>(7, 4), seq, options);
  ASSERT_TRUE(plain->StartEpoch(0).ok());
  ASSERT_TRUE(plain->Next().ok());
  EXPECT_EQ(plain->Next().status().message(), "DataLoader: batch 1, example 4: unreadable record");
}

TEST(ExampleDatasetTest, AsExamplesWritesTheDatasetsBytes) {
  SyntheticOptions so;
  so.size = 9;
  so.example_shape = {3, 2};
  std::shared_ptr<SyntheticDataset> images = *SyntheticDataset::Create(so);
  std::shared_ptr<const ExampleDataset> examples = AsExamples(images);
  ASSERT_EQ(examples->fields().size(), 2u);
  EXPECT_EQ(examples->fields()[0].shape, (std::vector<int64_t>{3, 2}));
  EXPECT_TRUE(examples->fields()[1].shape.empty());
  absl::StatusOr<std::vector<Tensor>> batch = StackExamples(*examples, {4, 1}, false);
  ASSERT_TRUE(batch.ok()) << batch.status();
  std::vector<float> x(6);
  int64_t y = -1;
  ASSERT_TRUE(images->Get(1, absl::MakeSpan(x), &y).ok());
  EXPECT_EQ(std::memcmp((*batch)[0].data<float>() + 6, x.data(), 6 * sizeof(float)), 0);
  EXPECT_EQ((*batch)[1].data<int64_t>()[1], y);
  std::vector<char> small(8), label(8);
  EXPECT_FALSE(examples->Get(0, std::vector<absl::Span<char>>{absl::MakeSpan(small), absl::MakeSpan(label)}).ok());
}

}  // namespace
}  // namespace lockstep
