// Mixed precision end to end: Linear computing in f16/bf16 with f32 master
// weights, GradScaler skipping overflowing steps without touching the
// weights, and both precisions actually learning.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "amp/grad_scaler.h"
#include "amp/precision_policy.h"
#include "core/half.h"
#include "core/kernels.h"
#include "core/mt19937.h"
#include "gtest/gtest.h"
#include "nn/cross_entropy.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "nn/sgd.h"

namespace lockstep {
namespace {

float RoundTo(DType dtype, float v) {
  return dtype == DType::kF16 ? HalfToFloat(FloatToHalf(v)) : BFloat16ToFloat(FloatToBFloat16(v));
}

// The distance between neighbouring values of the format at magnitude x
// (f16: 11 significant bits, normal from 2^-14; bf16: 8 bits, from 2^-126).
double FormatStep(DType dtype, double x) {
  const int bits = dtype == DType::kF16 ? 11 : 8;
  const int min_exponent = dtype == DType::kF16 ? -14 : -126;
  const int exponent = std::max(x > 0 ? std::ilogb(x) : min_exponent, min_exponent);
  return std::ldexp(1.0, exponent - bits + 1);
}

TEST(MixedPrecisionTest, LinearRoundsOperandsAccumulatesWideAndRoundsOnce) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    Mt19937 gen(3);
    LinearOptions options;
    options.in_features = 40;
    options.out_features = 7;
    options.compute_dtype = dtype;
    std::unique_ptr<Linear> fc = *Linear::Create(options, gen);
    std::vector<float> x(5 * 40);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7f * i);
    absl::StatusOr<Tensor> y = fc->Forward(*Tensor::FromVector<float>(x, {5, 40}));
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_EQ(y->dtype(), dtype);
    Tensor y32 = *Tensor::Empty({5, 7}, DType::kF32);
    ASSERT_TRUE(Cast(*y, y32).ok());
    std::vector<float> got = *y32.ToVector<float>();
    std::vector<float> w = *fc->weight().value.ToVector<float>();
    std::vector<float> b = *fc->bias().value.ToVector<float>();
    for (int i = 0; i < 5; ++i) {
      for (int j = 0; j < 7; ++j) {
        // The operands rounded to the format; each product is exact in f32
        // (11 + 11 or 8 + 8 significant bits), the sum of 41 terms is
        // accumulated in f32 in whatever order the kernel takes: within
        // gamma(41) * sum |terms| of the exact sum s (computed here in f64).
        double s = RoundTo(dtype, b[j]), magnitude = std::fabs(s);
        for (int k = 0; k < 40; ++k) {
          const double term = double{RoundTo(dtype, x[i * 40 + k])} * RoundTo(dtype, w[j * 40 + k]);
          s += term;
          magnitude += std::fabs(term);
        }
        const double delta = 41 * 0x1p-24 / (1 - 41 * 0x1p-24) * magnitude + 0x1p-24 * std::fabs(s);
        // One rounding to the format of a value within delta of s: the two
        // results differ by at most delta plus one step of the format there.
        const float expected = RoundTo(dtype, static_cast<float>(s));
        EXPECT_LE(std::fabs(got[i * 7 + j] - expected), delta + FormatStep(dtype, std::fabs(s) + delta))
            << DTypeName(dtype) << " " << i << "," << j;
      }
    }
  }
}

// Two Gaussian blobs per class in 8 dimensions; labels 0..3.
void Batch(Mt19937& gen, Tensor& x, Tensor& y) {
  std::vector<float> xs(64 * 8);
  std::vector<int64_t> ys(64);
  for (int i = 0; i < 64; ++i) {
    ys[i] = gen.Next32() % 4;
    for (int k = 0; k < 8; ++k) {
      const float noise = static_cast<float>(gen.Next32() % 1000) / 1000.0f - 0.5f;
      xs[i * 8 + k] = (k % 4 == ys[i] ? 2.0f : 0.0f) + noise;
    }
  }
  x = *Tensor::FromVector<float>(xs, {64, 8});
  y = *Tensor::FromVector<int64_t>(ys);
}

std::vector<std::vector<float>> Weights(Module& m) {
  std::vector<std::vector<float>> out;
  for (Parameter* p : m.Parameters()) out.push_back(*p->value.ToVector<float>());
  return out;
}

// An 8-32-4 MLP computing in `compute`, with plain SGD (lr 0.1).
struct Trainee {
  std::unique_ptr<Sequential> model;
  std::unique_ptr<Sgd> optimizer;
};

Trainee MakeTrainee(DType compute, uint64_t seed) {
  Mt19937 gen(seed);
  MlpOptions options;
  options.sizes = {8, 32, 4};
  options.flatten = false;
  options.compute_dtype = compute;
  Trainee t;
  t.model = *MakeMlp(options, gen);
  SgdOptions sgd;
  sgd.lr = 0.1;
  t.optimizer = *Sgd::Create(t.model->NamedParameters(), sgd);
  return t;
}

TEST(MixedPrecisionTest, F16OverflowIsSkippedAndTheScaleBacksOffThenItLearns) {
  const PrecisionPolicy policy = *ParsePrecision("fp16");
  ASSERT_TRUE(NeedsLossScaling(policy));
  Trainee t = MakeTrainee(policy.compute_dtype, 11);
  Sequential* model = t.model.get();
  Sgd* optimizer = t.optimizer.get();
  GradScalerOptions scaler_options;
  scaler_options.init_scale = 0x1p40;  // far beyond f16's range: the first steps overflow
  GradScaler scaler = *GradScaler::Create(scaler_options);

  Mt19937 data(5);
  int skipped = 0;
  double first_loss = 0.0, last_loss = 0.0;
  for (int step = 0; step < 200; ++step) {
    Tensor x, y;
    Batch(data, x, y);
    ASSERT_TRUE(optimizer->ZeroGrad().ok());
    absl::StatusOr<Tensor> logits = model->Forward(x);
    ASSERT_TRUE(logits.ok()) << logits.status();
    ASSERT_EQ(logits->dtype(), DType::kF16);
    absl::StatusOr<CrossEntropyResult> ce = CrossEntropy(*logits, y);
    ASSERT_TRUE(ce.ok()) << ce.status();
    if (step == 0) first_loss = ce->loss;
    last_loss = ce->loss;
    ASSERT_TRUE(scaler.Scale(ce->grad_logits).ok());  // f32, before backward rounds it to f16
    ASSERT_TRUE(model->Backward(ce->grad_logits, false).ok());
    std::vector<Tensor> grads;
    for (Parameter* p : model->Parameters()) grads.push_back(p->grad);
    const std::vector<std::vector<float>> before = Weights(*model);
    const float scale_before = scaler.scale();
    absl::StatusOr<bool> stepped = scaler.Step(grads, [&] { return optimizer->Step(); });
    ASSERT_TRUE(stepped.ok()) << stepped.status();
    if (!*stepped) {
      ++skipped;
      EXPECT_EQ(Weights(*model), before) << "a skipped step changed the weights";
    }
    ASSERT_TRUE(scaler.Update().ok());
    if (!*stepped) {
      EXPECT_EQ(scaler.scale(), scale_before * 0.5f);
    }
  }
  // 2^40 must back off below ~2^16 before gradients fit in f16.
  EXPECT_GE(skipped, 20);
  EXPECT_LT(skipped, 60);
  EXPECT_LT(last_loss, 0.5 * first_loss) << "first " << first_loss << " last " << last_loss;
}

TEST(MixedPrecisionTest, Bf16TrainsWithoutScaling) {
  const PrecisionPolicy policy = *ParsePrecision("bf16");
  ASSERT_FALSE(NeedsLossScaling(policy));
  Trainee t = MakeTrainee(policy.compute_dtype, 12);
  Sequential* model = t.model.get();
  Sgd* optimizer = t.optimizer.get();
  Mt19937 data(6);
  double first_loss = 0.0, last_loss = 0.0;
  for (int step = 0; step < 150; ++step) {
    Tensor x, y;
    Batch(data, x, y);
    ASSERT_TRUE(optimizer->ZeroGrad().ok());
    absl::StatusOr<CrossEntropyResult> ce = CrossEntropy(*model->Forward(x), y);
    ASSERT_TRUE(ce.ok()) << ce.status();
    if (step == 0) first_loss = ce->loss;
    last_loss = ce->loss;
    ASSERT_TRUE(model->Backward(ce->grad_logits, false).ok());
    for (Parameter* p : model->Parameters()) EXPECT_EQ(p->grad.dtype(), DType::kF32);  // master grads
    ASSERT_TRUE(optimizer->Step().ok());
  }
  EXPECT_LT(last_loss, 0.5 * first_loss) << "first " << first_loss << " last " << last_loss;
}

}  // namespace
}  // namespace lockstep
