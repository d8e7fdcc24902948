// ClipGradNorm and ClipGradValue against PyTorch 1.13's clip_grad_norm_ and
// clip_grad_value_ (nn/testdata/make_clip_grad_golden.py).
//
// What may legitimately differ: PyTorch sums each norm in f32 in an order
// that depends on the CPU's vector width; lockstep sums in f64 and rounds
// once. Both must lie within the radius nn/testing/error_bound.h derives
// around the exact norm (a sum of n terms in any order; sqrt and pow as one
// rounding and 4 ulps); the clipping coefficient and the clipped gradients
// carry that radius through PyTorch's f32 steps. Independently of PyTorch,
// the clipped gradients must be exactly g * coef with coef computed by
// PyTorch's formula from the norm ClipGradNorm returned, and clip_grad_value_
// (a clamp) must match bit for bit.
#include "nn/clip_grad.h"

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nn/testing/error_bound.h"
#include "nn/testing/golden_file.h"

namespace lockstep {
namespace {

namespace eb = error_bound;

constexpr char kGolden[] = "nn/testdata/clip_grad_golden.safetensors";
constexpr int kGrads = 3;

const GoldenFile& Golden() { return GoldenFile::Get(kGolden); }

const Tensor& At(const std::string& key) { return Golden().at(key); }

// Three parameters with the golden gradients, and one without a gradient.
struct Params {
  Parameter p[kGrads + 1];
  std::vector<Parameter*> all;
  Params() {
    for (int i = 0; i < kGrads; ++i) {
      p[i].value = *Tensor::Zeros(At(absl::StrCat("grad.", i)).shape(), DType::kF32);
      p[i].grad = *At(absl::StrCat("grad.", i)).Clone();
      all.push_back(&p[i]);
    }
    p[kGrads].value = *Tensor::Zeros({3}, DType::kF32);
    all.push_back(&p[kGrads]);
  }
};

// x ** q of a bounded positive value: the first-order radius (doubled) plus
// one transcendental result's ulps.
eb::Bounded Pow(eb::Bounded a, double q) {
  const double v = std::pow(a.v, q);
  const double slope = std::abs(q) * std::pow(a.v, q - 1.0);
  return {v, 2.0 * slope * a.e + eb::kTranscendentalUlps * 2.0 * eb::kUnit * std::abs(v)};
}

// The exact norm of order p of `values` and the radius of any f32 evaluation.
eb::Bounded Norm(const std::vector<eb::Bounded>& values, double p) {
  if (std::isinf(p)) {
    eb::Bounded m = eb::Exact(0.0);
    for (const eb::Bounded& v : values) m = eb::Max(m, {std::abs(v.v), v.e});
    return m;
  }
  if (p == 2.0) return eb::Sqrt(eb::Dot(values, values));
  std::vector<eb::Bounded> terms;
  for (const eb::Bounded& v : values)
    terms.push_back(p == 1.0 ? eb::Bounded{std::abs(v.v), v.e} : Pow({std::abs(v.v), v.e}, p));
  const eb::Bounded sum = eb::Sum(terms);
  return p == 1.0 ? sum : Pow(sum, 1.0 / p);
}

std::vector<eb::Bounded> Elements(const Tensor& t) {
  std::vector<eb::Bounded> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(eb::Exact(t.data<float>()[i]));
  return out;
}

double ParseOrder(const std::string& s) { return s == "inf" ? std::numeric_limits<double>::infinity() : std::stod(s); }

class ClipGradNormGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ClipGradNormGoldenTest, MatchesPyTorchWithinTheDerivedBound) {
  const std::string c = GetParam();
  const double p = ParseOrder(Golden().meta(c + ".norm_type"));
  const double max_norm = std::stod(Golden().meta(c + ".max_norm"));
  // The reference: per-tensor norms, then the norm of the norms.
  std::vector<eb::Bounded> norms;
  for (int i = 0; i < kGrads; ++i) norms.push_back(Norm(Elements(At(absl::StrCat("grad.", i))), p));
  const eb::Bounded total = Norm(norms, p);
  const float torch_total = At(c + ".total").data<float>()[0];
  ASSERT_TRUE(eb::ExpectWithin(torch_total, total, c + " PyTorch's total norm").ok());

  Params params;
  absl::StatusOr<double> ours = ClipGradNorm(params.all, max_norm, {p});
  ASSERT_TRUE(ours.ok()) << ours.status();
  const absl::Status within = eb::ExpectWithin(*ours, total, c + " our total norm");
  EXPECT_TRUE(within.ok()) << within;
  EXPECT_FALSE(params.p[kGrads].grad.defined());  // No gradient: left alone.

  // coef = min(fl(fl(1 / fl(total + 1e-6)) * max_norm), 1) in f32.
  const eb::Bounded reciprocal = eb::Div(eb::Exact(1.0), eb::Add(total, eb::Exact(1e-6f)));
  eb::Bounded coef = eb::Mul(reciprocal, eb::Exact(static_cast<float>(max_norm)));
  coef = {std::min(coef.v, 1.0), coef.e};
  const float our_coef = std::min((1.0f / (static_cast<float>(*ours) + 1e-6f)) * static_cast<float>(max_norm), 1.0f);
  for (int i = 0; i < kGrads; ++i) {
    const Tensor& before = At(absl::StrCat("grad.", i));
    const Tensor& theirs = At(absl::StrCat(c, ".grad.", i));
    eb::Matrix want = eb::FromTensor(before);
    for (eb::Bounded& x : want.x) x = eb::Mul(x, coef);
    const std::string what = absl::StrCat(c, " grad ", i);
    EXPECT_TRUE(eb::ExpectWithin(theirs, want, what + " (PyTorch's)").ok());
    const absl::Status s = eb::ExpectWithin(params.p[i].grad, want, what + " (ours)");
    EXPECT_TRUE(s.ok()) << s;
    for (int64_t k = 0; k < before.numel(); ++k) {
      ASSERT_EQ(params.p[i].grad.data<float>()[k], before.data<float>()[k] * our_coef) << what << " element " << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, ClipGradNormGoldenTest, ::testing::Values("l2", "l2_noclip", "l1", "linf", "p3"));

TEST(ClipGradNormTest, TheCoefficientIsClampedToOneAndStillApplied) {
  Params params;
  absl::StatusOr<double> total = ClipGradNorm(params.all, 1e4);
  ASSERT_TRUE(total.ok()) << total.status();
  for (int i = 0; i < kGrads; ++i) {
    const Tensor& before = At(absl::StrCat("grad.", i));
    for (int64_t k = 0; k < before.numel(); ++k) ASSERT_EQ(params.p[i].grad.data<float>()[k], before.data<float>()[k]);
  }
}

TEST(ClipGradValueTest, MatchesPyTorchBitForBit) {
  Params params;
  ASSERT_TRUE(ClipGradValue(params.all, std::stod(Golden().meta("value.clip_value"))).ok());
  for (int i = 0; i < kGrads; ++i) {
    const Tensor& theirs = At(absl::StrCat("value.grad.", i));
    for (int64_t k = 0; k < theirs.numel(); ++k) {
      ASSERT_EQ(params.p[i].grad.data<float>()[k], theirs.data<float>()[k]) << "grad " << i << " element " << k;
    }
  }
  EXPECT_FALSE(ClipGradValue(params.all, -1.0).ok());
  EXPECT_FALSE(ClipGradValue(params.all, std::nan("")).ok());
}

TEST(ClipGradNormTest, ANonFiniteNormIsRefusedInPyTorchsWordsAndNothingChanges) {
  Params params;
  params.p[0].grad.data<float>()[0] = std::numeric_limits<float>::infinity();
  const std::vector<float> before = *params.p[1].grad.ToVector<float>();
  ClipGradNormOptions options;
  options.error_if_nonfinite = true;
  absl::StatusOr<double> total = ClipGradNorm(params.all, 1.0, options);
  ASSERT_FALSE(total.ok());
  EXPECT_EQ(total.status().message(), Golden().meta("nonfinite.message"));
  EXPECT_EQ(*params.p[1].grad.ToVector<float>(), before);
  EXPECT_TRUE(std::isinf(params.p[0].grad.data<float>()[0]));
  // Without the check the gradients are scaled by the non-finite norm, as
  // PyTorch does: coef = 1 / (inf + 1e-6) = 0.
  absl::StatusOr<double> anyway = ClipGradNorm(params.all, 1.0);
  ASSERT_TRUE(anyway.ok()) << anyway.status();
  EXPECT_TRUE(std::isinf(*anyway));
  EXPECT_EQ(params.p[1].grad.data<float>()[0], 0.0f);
}

TEST(ClipGradNormTest, NoGradientsGiveZeroAndFrozenParametersAreSkipped) {
  Parameter frozen;
  frozen.value = *Tensor::Zeros({4}, DType::kF32);
  frozen.requires_grad = false;
  absl::StatusOr<double> none = ClipGradNorm({&frozen}, 1.0);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, 0.0);
  EXPECT_FALSE(ClipGradNorm({&frozen}, 1.0, {0.0}).ok());  // Order 0 is refused.
  Parameter mixed;
  mixed.value = *Tensor::Zeros({2}, DType::kF64);
  mixed.grad = *Tensor::Zeros({2}, DType::kF64);
  Params params;
  std::vector<Parameter*> both = params.all;
  both.push_back(&mixed);
  absl::StatusOr<double> refused = ClipGradNorm(both, 1.0);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("several dtypes"), std::string::npos) << refused.status();
}

}  // namespace
}  // namespace lockstep
