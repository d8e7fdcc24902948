// The derived radii hold for f32 computations in every summation order we
// can write, fused or not, and are tight enough to catch a one-term error.
#include "nn/testing/error_bound.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace error_bound {
namespace {

std::vector<float> Random(std::mt19937& gen, int n, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

std::vector<Bounded> Exacts(const std::vector<float>& v) {
  std::vector<Bounded> out;
  for (float x : v) out.push_back(Exact(x));
  return out;
}

// Sums a[i]*b[i] in f32 in the given order, with or without fma.
float F32Dot(const std::vector<float>& a, const std::vector<float>& b, const std::vector<int>& order, bool fused) {
  float s = 0.0f;
  for (int i : order) s = fused ? std::fmaf(a[i], b[i], s) : s + a[i] * b[i];
  return s;
}

// Pairwise (blocked) summation, as a vectorized kernel does.
float F32PairwiseDot(const std::vector<float>& a, const std::vector<float>& b, size_t lo, size_t hi) {
  if (hi - lo <= 4) {
    float s = 0.0f;
    for (size_t i = lo; i < hi; ++i) s += a[i] * b[i];
    return s;
  }
  const size_t mid = (lo + hi) / 2;
  return F32PairwiseDot(a, b, lo, mid) + F32PairwiseDot(a, b, mid, hi);
}

TEST(ErrorBoundTest, DotHoldsForEveryOrderFusedOrNot) {
  std::mt19937 gen(7);
  for (int n : {1, 3, 8, 20, 33, 512}) {
    for (int trial = 0; trial < 50; ++trial) {
      const std::vector<float> a = Random(gen, n, 1.0f), b = Random(gen, n, 0.1f);
      const Bounded want = Dot(Exacts(a), Exacts(b));
      std::vector<int> order(n);
      for (int i = 0; i < n; ++i) order[i] = i;
      for (int k = 0; k < 4; ++k) {
        for (bool fused : {false, true}) {
          EXPECT_TRUE(ExpectWithin(F32Dot(a, b, order, fused), want, "dot").ok()) << n;
        }
        std::shuffle(order.begin(), order.end(), gen);
      }
      EXPECT_TRUE(ExpectWithin(F32PairwiseDot(a, b, 0, n), want, "pairwise dot").ok()) << n;
    }
  }
}

TEST(ErrorBoundTest, DotCatchesOneWrongTerm) {
  std::mt19937 gen(8);
  const std::vector<float> a = Random(gen, 20, 1.0f), b = Random(gen, 20, 1.0f);
  const Bounded want = Dot(Exacts(a), Exacts(b));
  std::vector<float> c = a;
  c[5] *= 1.0f + 1e-4f;  // one input off by 1e-4 relative, far from rounding
  std::vector<int> order(20);
  for (int i = 0; i < 20; ++i) order[i] = i;
  EXPECT_FALSE(ExpectWithin(F32Dot(c, b, order, false), want, "dot").ok());
  // The radius is gamma(20) of the magnitudes: about 1.2e-6 of them.
  double magnitude = 0.0;
  for (int i = 0; i < 20; ++i) magnitude += std::fabs(double{a[i]} * b[i]);
  EXPECT_LE(want.e, 1.3e-6 * magnitude);
}

TEST(ErrorBoundTest, ReluBackwardCoversBothBranchesNearZero) {
  Matrix z(1, 3), dy(1, 3);
  z.x = {{1e-9, 1e-8}, {-1.0, 1e-8}, {1.0, 1e-8}};
  dy.x = {Exact(2.0), Exact(3.0), Exact(4.0)};
  const Matrix dz = ReluBackward(z, dy);
  EXPECT_TRUE(ExpectWithin(0.0, dz.x[0], "").ok());
  EXPECT_TRUE(ExpectWithin(2.0, dz.x[0], "").ok());
  EXPECT_EQ(dz.x[1].v, 0.0);
  EXPECT_EQ(dz.x[1].e, 0.0);
  EXPECT_EQ(dz.x[2].v, 4.0);
}

TEST(ErrorBoundTest, CrossEntropyHoldsForAnF32Softmax) {
  std::mt19937 gen(9);
  const int batch = 8, classes = 5;
  const std::vector<float> z = Random(gen, batch * classes, 3.0f);
  std::vector<int64_t> y(batch);
  for (int r = 0; r < batch; ++r) y[r] = r % classes;
  Matrix zm(batch, classes);
  zm.x = Exacts(z);
  const CrossEntropyBounds want = CrossEntropy(zm, y);
  float loss = 0.0f;
  for (int r = 0; r < batch; ++r) {
    float m = z[r * classes];
    for (int j = 0; j < classes; ++j) m = std::max(m, z[r * classes + j]);
    float s = 0.0f;
    for (int j = 0; j < classes; ++j) s += std::exp(z[r * classes + j] - m);
    for (int j = 0; j < classes; ++j) {
      const float p = std::exp(z[r * classes + j] - m) / s;
      const float g = (p - (j == y[r] ? 1.0f : 0.0f)) / batch;
      EXPECT_TRUE(ExpectWithin(g, want.grad.at(r, j), "grad").ok()) << r << "," << j;
    }
    loss -= z[r * classes + y[r]] - m - std::log(s);
  }
  EXPECT_TRUE(ExpectWithin(loss / batch, want.loss, "loss").ok());
  EXPECT_LT(MaxRelativeRadius(want.grad), 1e-4);
}

TEST(ErrorBoundTest, SgdWithMomentumMatchesF32Arithmetic) {
  SgdConfig c;
  c.lr = 0.1, c.momentum = 0.9, c.weight_decay = 1e-3;
  Matrix p(1, 1), g(1, 1), buf;
  p.x = {Exact(0.5f)};
  g.x = {Exact(-0.25f)};
  const float lr = 0.1f, mom = 0.9f, wd = 1e-3f;
  float pf = 0.5f, bf = 0.0f;
  for (int step = 0; step < 3; ++step) {
    const float d = -0.25f + wd * pf;
    bf = step == 0 ? d : bf * mom + d;
    pf = pf + bf * -lr;
    p = SgdStep(c, p, g, buf);
    EXPECT_TRUE(ExpectWithin(pf, p.x[0], "param").ok()) << step;
    EXPECT_LT(p.x[0].e, 1e-6);
  }
}

}  // namespace
}  // namespace error_bound
}  // namespace lockstep
