#include "nn/cross_entropy.h"

#include <cmath>
#include <vector>

#include "core/kernels.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(CrossEntropyTest, LossGradientAndAccuracyAgainstFormula) {
  const std::vector<float> z = {2.0f,    1.0f, 0.1f,       // label 0, argmax 0
                                0.5f,    2.5f, -1.0f,      // label 2, argmax 1
                                1000.0f, 0.0f, -1000.0f};  // label 1: stable at extremes
  Tensor logits = *Tensor::FromVector<float>(z, {3, 3});
  Tensor labels = *Tensor::FromVector<int64_t>({0, 2, 1});
  absl::StatusOr<CrossEntropyResult> ce = CrossEntropy(logits, labels);
  ASSERT_TRUE(ce.ok()) << ce.status();
  double expected = 0.0;
  std::vector<double> grad(9);
  const int y[3] = {0, 2, 1};
  for (int i = 0; i < 3; ++i) {
    double m = std::max({z[3 * i], z[3 * i + 1], z[3 * i + 2]});
    double s = 0.0;
    for (int j = 0; j < 3; ++j) s += std::exp(z[3 * i + j] - m);
    expected += -(z[3 * i + y[i]] - m - std::log(s)) / 3.0;
    for (int j = 0; j < 3; ++j) grad[3 * i + j] = (std::exp(z[3 * i + j] - m) / s - (j == y[i])) / 3.0;
  }
  EXPECT_NEAR(ce->loss, expected, 1e-12);
  EXPECT_NEAR(ce->loss, (0.41703 + 3.65318 + 1000.0) / 3.0, 1e-4);  // by hand
  std::vector<float> g = *ce->grad_logits.ToVector<float>();
  for (int k = 0; k < 9; ++k) EXPECT_NEAR(g[k], grad[k], 1e-7) << k;
  EXPECT_EQ(ce->correct, 1);
  EXPECT_EQ(ce->counted, 3);
}

TEST(CrossEntropyTest, IgnoreIndexAndI32Labels) {
  Tensor logits = *Tensor::FromVector<float>({1, 2, 3, 4}, {2, 2});
  Tensor labels = *Tensor::FromVector<int32_t>({-100, 1});
  absl::StatusOr<CrossEntropyResult> ce = CrossEntropy(logits, labels);
  ASSERT_TRUE(ce.ok()) << ce.status();
  EXPECT_EQ(ce->counted, 1);
  EXPECT_NEAR(ce->loss, std::log(1.0 + std::exp(-1.0)), 1e-12);
  std::vector<float> g = *ce->grad_logits.ToVector<float>();
  EXPECT_EQ(g[0], 0.0f);
  EXPECT_EQ(g[1], 0.0f);
  Tensor all_ignored = *Tensor::FromVector<int64_t>({-100, -100});
  EXPECT_TRUE(std::isnan(CrossEntropy(logits, all_ignored)->loss));  // as torch: 0/0
}

TEST(CrossEntropyTest, HalfLogitsGiveF32Gradient) {
  Tensor logits32 = *Tensor::FromVector<float>({0.5f, -0.25f, 1.0f, 2.0f}, {2, 2});
  Tensor logits16 = *Tensor::Empty({2, 2}, DType::kF16);
  ASSERT_TRUE(Cast(logits32, logits16).ok());
  Tensor labels = *Tensor::FromVector<int64_t>({0, 1});
  absl::StatusOr<CrossEntropyResult> a = CrossEntropy(logits16, labels);
  absl::StatusOr<CrossEntropyResult> b = CrossEntropy(logits32, labels);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->grad_logits.dtype(), DType::kF32);
  EXPECT_DOUBLE_EQ(a->loss, b->loss);  // these values are exact in f16
}

TEST(CrossEntropyTest, BadInputsNameTheProblem) {
  Tensor logits = *Tensor::Zeros({2, 3}, DType::kF32);
  absl::StatusOr<CrossEntropyResult> r = CrossEntropy(logits, *Tensor::FromVector<int64_t>({0, 3}));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("label 3 at row 1 is outside [0, 3)"), absl::string_view::npos) << r.status();
  EXPECT_FALSE(CrossEntropy(logits, *Tensor::FromVector<int64_t>({0})).ok());
  EXPECT_FALSE(CrossEntropy(logits, *Tensor::FromVector<float>({0, 1})).ok());
  EXPECT_FALSE(CrossEntropy(*Tensor::Zeros({6}, DType::kF32), *Tensor::FromVector<int64_t>({0})).ok());
}

}  // namespace
}  // namespace lockstep
