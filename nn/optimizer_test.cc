// Optimizer rules beyond the golden MLP: validation, maximize, skipped
// parameters, and exact resume from saved state.
#include <cmath>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/sgd.h"

namespace lockstep {
namespace {

struct Params {
  Parameter a, b;
  std::vector<NamedParameter> named() { return {{"a", &a}, {"b", &b}}; }
};

std::unique_ptr<Params> MakeParams() {
  auto p = std::make_unique<Params>();
  p->a.value = *Tensor::FromVector<float>({1.0f, -2.0f, 3.0f});
  p->b.value = *Tensor::FromVector<float>({0.5f, 0.25f}, {1, 2});
  return p;
}

void SetGrads(Params& p, float k) {
  p.a.grad = *Tensor::FromVector<float>({0.1f * k, -0.2f, 0.3f * k});
  p.b.grad = *Tensor::FromVector<float>({-0.5f, 0.05f * k}, {1, 2});
}

TEST(SgdTest, PlainStepIsPMinusLrG) {
  auto p = MakeParams();
  SgdOptions o;
  o.lr = 0.5;
  auto sgd = *Sgd::Create(p->named(), o);
  SetGrads(*p, 1.0f);
  ASSERT_TRUE(sgd->Step().ok());
  EXPECT_EQ(*p->a.value.ToVector<float>(),
            (std::vector<float>{1.0f - 0.5f * 0.1f, -2.0f + 0.5f * 0.2f, 3.0f - 0.5f * 0.3f}));
  o.maximize = true;
  auto up = *Sgd::Create(p->named(), o);
  const std::vector<float> before = *p->b.value.ToVector<float>();
  ASSERT_TRUE(up->Step().ok());
  EXPECT_EQ((*p->b.value.ToVector<float>())[0], before[0] + 0.5f * -0.5f);
}

TEST(SgdTest, ValidationMatchesPyTorch) {
  auto p = MakeParams();
  SgdOptions o;
  o.lr = -1;
  EXPECT_NE(Sgd::Create(p->named(), o).status().message().find("Invalid learning rate"), absl::string_view::npos);
  o.lr = 0.1;
  o.nesterov = true;
  EXPECT_NE(Sgd::Create(p->named(), o).status().message().find("Nesterov momentum requires"), absl::string_view::npos);
  o.momentum = 0.9;
  o.dampening = 0.1;
  EXPECT_FALSE(Sgd::Create(p->named(), o).ok());
  o.dampening = 0.0;
  EXPECT_TRUE(Sgd::Create(p->named(), o).ok());
  std::vector<NamedParameter> twice = {{"a", &p->a}, {"a2", &p->a}};
  EXPECT_NE(Sgd::Create(twice, o).status().message().find("appears twice"), absl::string_view::npos);
  Parameter half;
  half.value = *Tensor::Zeros({2}, DType::kF16);
  EXPECT_NE(Sgd::Create({{"h", &half}}, o).status().message().find("f32 (master) weights"), absl::string_view::npos);
}

TEST(AdamTest, ValidationMatchesPyTorch) {
  auto p = MakeParams();
  AdamOptions o;
  o.beta2 = 1.0;
  EXPECT_NE(Adam::Create(p->named(), o).status().message().find("Invalid beta parameter at index 1"),
            absl::string_view::npos);
  o = AdamWOptions();
  EXPECT_EQ(o.weight_decay, 1e-2);
  o.eps = -1;
  EXPECT_NE(Adam::Create(p->named(), o).status().message().find("AdamW: Invalid epsilon"), absl::string_view::npos);
}

TEST(AdamTest, FirstStepMovesEachWeightByAboutLr) {
  // With bias correction, |update| = lr * |g| / (|g| + eps') ~ lr on step 1.
  auto p = MakeParams();
  AdamOptions o;
  o.lr = 0.01;
  auto adam = *Adam::Create(p->named(), o);
  SetGrads(*p, 1.0f);
  const std::vector<float> before = *p->a.value.ToVector<float>();
  ASSERT_TRUE(adam->Step().ok());
  const std::vector<float> after = *p->a.value.ToVector<float>();
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(std::fabs(after[i] - before[i]), 0.01, 1e-6);
}

TEST(OptimizerTest, ParametersWithoutGradientsAreSkipped) {
  auto p = MakeParams();
  AdamOptions o;
  auto adam = *Adam::Create(p->named(), o);
  p->a.grad = *Tensor::FromVector<float>({1, 1, 1});
  const std::vector<float> b_before = *p->b.value.ToVector<float>();
  ASSERT_TRUE(adam->Step().ok());
  EXPECT_EQ(*p->b.value.ToVector<float>(), b_before);
  std::vector<NamedTensor> state = adam->StateTensors();
  ASSERT_EQ(state.size(), 3u);  // only parameter 0 has state
  EXPECT_EQ(state[0].first, "state.0.step");
  EXPECT_EQ(state[1].first, "state.0.exp_avg");
  EXPECT_EQ(state[2].first, "state.0.exp_avg_sq");
  EXPECT_EQ(state[0].second.shape(), Shape{});
  EXPECT_EQ((*state[0].second.ToVector<float>())[0], 1.0f);
}

// Running 2 steps, saving, and continuing in a fresh optimizer gives the
// same bits as running straight through.
template <typename Make>
void ExpectExactResume(Make make) {
  auto straight = MakeParams();
  auto opt1 = make(straight->named());
  for (int k = 0; k < 4; ++k) {
    SetGrads(*straight, 1.0f + k);
    ASSERT_TRUE(opt1->Step().ok());
  }
  auto resumed = MakeParams();
  auto opt2 = make(resumed->named());
  for (int k = 0; k < 2; ++k) {
    SetGrads(*resumed, 1.0f + k);
    ASSERT_TRUE(opt2->Step().ok());
  }
  std::vector<NamedTensor> saved;
  for (const NamedTensor& t : opt2->StateTensors()) saved.emplace_back(t.first, *t.second.Clone());
  auto opt3 = make(resumed->named());
  ASSERT_TRUE(opt3->LoadStateTensors(saved).ok());
  for (int k = 2; k < 4; ++k) {
    SetGrads(*resumed, 1.0f + k);
    ASSERT_TRUE(opt3->Step().ok());
  }
  EXPECT_EQ(*resumed->a.value.ToVector<float>(), *straight->a.value.ToVector<float>());
  EXPECT_EQ(*resumed->b.value.ToVector<float>(), *straight->b.value.ToVector<float>());
}

TEST(OptimizerTest, ExactResumeFromState) {
  ExpectExactResume([](std::vector<NamedParameter> p) {
    SgdOptions o;
    o.lr = 0.1, o.momentum = 0.9, o.nesterov = true;
    return *Sgd::Create(std::move(p), o);
  });
  ExpectExactResume([](std::vector<NamedParameter> p) {
    AdamOptions o = AdamWOptions();
    o.amsgrad = true;
    return *Adam::Create(std::move(p), o);
  });
}

TEST(OptimizerTest, BadStateIsRefusedWithEveryProblemListed) {
  auto p = MakeParams();
  auto adam = *Adam::Create(p->named(), AdamOptions());
  std::vector<NamedTensor> bad = {
      {"state.0.step", *Tensor::Zeros({}, DType::kF32)},
      {"state.0.exp_avg", *Tensor::Zeros({4}, DType::kF32)},
      {"state.7.exp_avg", *Tensor::Zeros({3}, DType::kF32)},
      {"state.1.momentum_buffer", *Tensor::Zeros({1, 2}, DType::kF32)},
  };
  absl::Status s = adam->LoadStateTensors(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  for (const char* part : {"'state.0.exp_avg': expected f32[3], got", "'state.7.exp_avg' is not",
                           "'state.1.momentum_buffer': unknown key", "state.0.exp_avg_sq is missing"}) {
    EXPECT_NE(s.message().find(part), absl::string_view::npos) << part << "\n" << s;
  }
  EXPECT_TRUE(adam->StateTensors().empty());
}

}  // namespace
}  // namespace lockstep
