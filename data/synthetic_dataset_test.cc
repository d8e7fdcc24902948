#include "data/synthetic_dataset.h"

#include <cmath>
#include <vector>

#include "data/normalize.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

std::vector<float> Features(const Dataset& d, int64_t i, int64_t* label) {
  std::vector<float> x(d.example_numel());
  EXPECT_TRUE(d.Get(i, absl::MakeSpan(x), label).ok());
  return x;
}

TEST(SyntheticDatasetTest, DeterministicAndSeedDependent) {
  SyntheticOptions o;
  o.size = 1000;
  auto a = *SyntheticDataset::Create(o);
  auto b = *SyntheticDataset::Create(o);
  o.seed = 1;
  auto c = *SyntheticDataset::Create(o);
  int64_t la, lb, lc;
  // Any order, same bits.
  const std::vector<float> x999 = Features(*a, 999, &la);
  Features(*b, 5, &lb);
  EXPECT_EQ(Features(*b, 999, &lb), x999);
  EXPECT_EQ(la, lb);
  EXPECT_NE(Features(*c, 999, &lc), x999);
  EXPECT_EQ(a->example_shape(), (std::vector<int64_t>{1, 28, 28}));
}

TEST(SyntheticDatasetTest, ClassesAreBalancedAndLearnable) {
  SyntheticOptions o;
  o.size = 4000;
  auto d = *SyntheticDataset::Create(o);
  const int64_t k = d->num_classes(), n = d->example_numel();
  // Estimate class means from the first half, classify the second half by the
  // nearest estimated mean: an independent check that the labels carry signal.
  std::vector<double> means(k * n, 0.0);
  std::vector<int64_t> counts(k, 0);
  for (int64_t i = 0; i < 2000; ++i) {
    int64_t y;
    const std::vector<float> x = Features(*d, i, &y);
    ASSERT_TRUE(y >= 0 && y < k);
    ++counts[y];
    for (int64_t j = 0; j < n; ++j) means[y * n + j] += x[j];
  }
  for (int64_t c = 0; c < k; ++c) {
    EXPECT_GT(counts[c], 2000 / k / 2) << "class " << c << " is rare";
    for (int64_t j = 0; j < n; ++j) means[c * n + j] /= counts[c];
  }
  int correct = 0;
  for (int64_t i = 2000; i < 4000; ++i) {
    int64_t y;
    const std::vector<float> x = Features(*d, i, &y);
    int64_t best = -1;
    double best_distance = 1e300;
    for (int64_t c = 0; c < k; ++c) {
      double distance = 0;
      for (int64_t j = 0; j < n; ++j) distance += (x[j] - means[c * n + j]) * (x[j] - means[c * n + j]);
      if (distance < best_distance) best_distance = distance, best = c;
    }
    correct += best == y;
  }
  // Chance is 10%; the clusters are separable but noisy.
  EXPECT_GT(correct, 1600);
}

TEST(SyntheticDatasetTest, BadOptionsAndIndices) {
  SyntheticOptions o;
  o.size = 0;
  EXPECT_FALSE(SyntheticDataset::Create(o).ok());
  o.size = 10;
  o.example_shape = {0, 3};
  EXPECT_FALSE(SyntheticDataset::Create(o).ok());
  o.example_shape = {4};
  o.noise = -1;
  EXPECT_FALSE(SyntheticDataset::Create(o).ok());
  o.noise = 1;
  auto d = *SyntheticDataset::Create(o);
  std::vector<float> x(4);
  int64_t y;
  EXPECT_EQ(d->Get(10, absl::MakeSpan(x), &y).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(d->Get(-1, absl::MakeSpan(x), &y).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(d->Get(0, absl::MakeSpan(x).subspan(1), &y).code(), absl::StatusCode::kInvalidArgument);
}

TEST(NormalizeTest, PerChannelMeanAndStd) {
  SyntheticOptions o;
  o.size = 3;
  o.example_shape = {2, 3};
  auto base = *SyntheticDataset::Create(o);
  auto norm = *Normalize::Create(base, {1.0f, -2.0f}, {0.5f, 4.0f});
  int64_t y1, y2;
  const std::vector<float> raw = Features(*base, 1, &y1);
  const std::vector<float> out = Features(*norm, 1, &y2);
  EXPECT_EQ(y1, y2);
  for (int j = 0; j < 3; ++j) EXPECT_EQ(out[j], (raw[j] - 1.0f) / 0.5f);
  for (int j = 3; j < 6; ++j) EXPECT_EQ(out[j], (raw[j] + 2.0f) / 4.0f);
  EXPECT_FALSE(Normalize::Create(base, {1, 2, 3}, {1, 2, 3}).ok());
  EXPECT_FALSE(Normalize::Create(base, {0}, {0}).ok());
  EXPECT_FALSE(Normalize::Create(base, {0}, {1, 1}).ok());
  EXPECT_FALSE(Normalize::Create(nullptr, {0}, {1}).ok());
}

}  // namespace
}  // namespace lockstep
