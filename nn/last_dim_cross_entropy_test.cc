#include "nn/last_dim_cross_entropy.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

// A sequence model's logits [B, T, C] against targets [B, T]: the same loss,
// counts and gradient as the flattened [B*T, C] against [B*T], the gradient
// in the logits' shape.
TEST(LastDimCrossEntropyTest, FlattensPositions) {
  std::vector<float> values(2 * 3 * 5);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((i * 7) % 11) / 4.0f - 1.0f;
  Tensor logits = *Tensor::FromVector<float>(values);
  logits = *logits.Reshape({2, 3, 5});
  Tensor targets = *Tensor::FromVector<int64_t>({0, 4, 2, 1, 3, 3});
  targets = *targets.Reshape({2, 3});
  absl::StatusOr<CrossEntropyResult> seq = TargetsCrossEntropy(logits, targets);
  ASSERT_TRUE(seq.ok()) << seq.status();
  absl::StatusOr<CrossEntropyResult> flat = CrossEntropy(*logits.Reshape({6, 5}), *targets.Reshape({6}));
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_EQ(seq->loss, flat->loss);
  EXPECT_EQ(seq->counted, 6);
  EXPECT_EQ(seq->correct, flat->correct);
  EXPECT_EQ(seq->grad_logits.shape(), (Shape{2, 3, 5}));
  EXPECT_EQ(*seq->grad_logits.ToVector<float>(), *flat->grad_logits.ToVector<float>());
  // Targets that do not match the positions are an error naming both shapes.
  absl::StatusOr<CrossEntropyResult> bad = TargetsCrossEntropy(logits, *targets.Reshape({3, 2}));
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("[2, 3, 5]"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("[3, 2]"), std::string::npos) << bad.status();
}

// A classifier's [N, C] against [N] is CrossEntropy itself; a vector of
// logits has no class dimension to take.
TEST(LastDimCrossEntropyTest, ClassifierLogitsAndTooFewDimensions) {
  Tensor logits = *Tensor::FromVector<float>({2.0f, 0.5f, -1.0f, 0.0f, 1.0f, 3.0f}, {2, 3});
  Tensor targets = *Tensor::FromVector<int64_t>({0, 1});
  absl::StatusOr<CrossEntropyResult> ce = TargetsCrossEntropy(logits, targets);
  ASSERT_TRUE(ce.ok()) << ce.status();
  absl::StatusOr<CrossEntropyResult> direct = CrossEntropy(logits, targets);
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_EQ(ce->loss, direct->loss);
  EXPECT_EQ(ce->correct, 1);
  EXPECT_EQ(ce->grad_logits.shape(), (Shape{2, 3}));
  Tensor vector = *Tensor::FromVector<float>({1.0f, 2.0f});
  EXPECT_EQ(TargetsCrossEntropy(vector, *Tensor::FromVector<int64_t>({0})).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Uniform logits over 3 classes: log 3 per position, whatever the rank.
TEST(LastDimCrossEntropyTest, UniformLogits) {
  Tensor logits = *Tensor::FromVector<float>(std::vector<float>(2 * 4 * 3, 0.0f), {2, 4, 3});
  Tensor targets = *Tensor::FromVector<int64_t>({0, 1, 2, 0, 1, 2, 0, 1}, {2, 4});
  absl::StatusOr<CrossEntropyResult> ce = TargetsCrossEntropy(logits, targets);
  ASSERT_TRUE(ce.ok()) << ce.status();
  EXPECT_EQ(ce->counted, 8);
  EXPECT_NEAR(ce->loss, std::log(3.0), 1e-12);
  EXPECT_EQ(ce->grad_logits.shape(), (Shape{2, 4, 3}));
}

}  // namespace
}  // namespace lockstep
