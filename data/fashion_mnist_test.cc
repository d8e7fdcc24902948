// Loads the real Fashion-MNIST files of Debian's dataset-fashion-mnist;
// skips where the package is not installed. Expected values were read with
// numpy from the same files (labels, class counts, pixel sums).
#include <sys/stat.h>

#include <cmath>
#include <vector>

#include "data/idx_dataset.h"
#include "data/normalize.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

class FashionMnistTest : public ::testing::Test {
 protected:
  void SetUp() override {
    struct stat st;
    if (stat(kDefaultFashionMnistDir, &st) != 0) {
      GTEST_SKIP() << kDefaultFashionMnistDir << " missing (apt-get install dataset-fashion-mnist)";
    }
  }
};

TEST_F(FashionMnistTest, TrainAndTestSplits) {
  auto train = LoadFashionMnist(kDefaultFashionMnistDir, Split::kTrain);
  ASSERT_TRUE(train.ok()) << train.status();
  auto test = LoadFashionMnist(kDefaultFashionMnistDir, Split::kTest);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ((*train)->size(), 60000);
  EXPECT_EQ((*test)->size(), 10000);
  EXPECT_EQ((*train)->example_shape(), (std::vector<int64_t>{1, 28, 28}));
  EXPECT_EQ((*train)->num_classes(), 10);
  std::vector<int64_t> counts(10);
  for (uint8_t l : (*train)->labels()) ++counts.at(l);
  EXPECT_EQ(counts, std::vector<int64_t>(10, 6000));
  const std::vector<int64_t> first_train = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
  const std::vector<int64_t> first_test = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7};
  std::vector<float> x(784);
  for (int i = 0; i < 10; ++i) {
    int64_t y;
    ASSERT_TRUE((*train)->Get(i, absl::MakeSpan(x), &y).ok());
    EXPECT_EQ(y, first_train[i]);
    ASSERT_TRUE((*test)->Get(i, absl::MakeSpan(x), &y).ok());
    EXPECT_EQ(y, first_test[i]);
  }
  int64_t y;
  ASSERT_TRUE((*train)->Get(0, absl::MakeSpan(x), &y).ok());
  double sum = 0;
  for (float v : x) {
    ASSERT_GE(v, 0.0f);
    ASSERT_LE(v, 1.0f);
    sum += v;
  }
  EXPECT_NEAR(sum * 255, 76247, 1e-2);  // Pixel sum of image 0.
}

TEST_F(FashionMnistTest, NormalizedTrainSetHasZeroMeanAndUnitStd) {
  auto train = *LoadFashionMnist(kDefaultFashionMnistDir, Split::kTrain);
  auto normalized = *Normalize::Create(train, {kFashionMnistMean}, {kFashionMnistStd});
  double sum = 0, sum_sq = 0;
  std::vector<float> x(784);
  int64_t y;
  for (int64_t i = 0; i < normalized->size(); ++i) {
    ASSERT_TRUE(normalized->Get(i, absl::MakeSpan(x), &y).ok());
    for (float v : x) {
      sum += v;
      sum_sq += double{v} * v;
    }
  }
  const double n = 60000.0 * 784;
  EXPECT_NEAR(sum / n, 0.0, 1e-3);
  EXPECT_NEAR(std::sqrt(sum_sq / n - (sum / n) * (sum / n)), 1.0, 1e-3);
}

}  // namespace
}  // namespace lockstep
