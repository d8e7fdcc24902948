#include "nn/math.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/half.h"
#include "core/kernels.h"
#include "gtest/gtest.h"
#include "nn/kernels/window_elementwise.h"

namespace lockstep {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Row-major reference in double: op(A) [m, k] x op(B) [k, n].
std::vector<double> Reference(const std::vector<float>& a, bool ta, const std::vector<float>& b, bool tb, int m, int n,
                              int k) {
  std::vector<double> c(static_cast<size_t>(m) * n, 0.0);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double s = 0.0;
      for (int p = 0; p < k; ++p) {
        const double x = ta ? a[p * m + i] : a[i * k + p];
        const double y = tb ? b[j * k + p] : b[p * n + j];
        s += x * y;
      }
      c[i * n + j] = s;
    }
  }
  return c;
}

TEST(GemmTest, AllTranspositionsAgainstReference) {
  const int m = 13, n = 7, k = 29;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      std::vector<float> a = Random(m * k, 1), b = Random(k * n, 2), c0 = Random(m * n, 3);
      Tensor ta_t = *Tensor::FromVector<float>(a, ta ? Shape{k, m} : Shape{m, k});
      Tensor tb_t = *Tensor::FromVector<float>(b, tb ? Shape{n, k} : Shape{k, n});
      Tensor c = *Tensor::FromVector<float>(c0, {m, n});
      ASSERT_TRUE(Gemm(ta_t, ta, tb_t, tb, c, 0.5f, 2.0f).ok());
      std::vector<double> ref = Reference(a, ta, b, tb, m, n, k);
      std::vector<float> got = *c.ToVector<float>();
      for (int i = 0; i < m * n; ++i) {
        EXPECT_NEAR(got[i], 0.5 * ref[i] + 2.0 * c0[i], 1e-5) << ta << tb << " at " << i;
      }
    }
  }
}

TEST(GemmTest, BetaZeroIgnoresNaNInOutput) {
  Tensor a = *Tensor::FromVector<float>({1, 2, 3, 4}, {2, 2});
  Tensor c = *Tensor::FromVector<float>({NAN, NAN, NAN, NAN}, {2, 2});
  ASSERT_TRUE(Gemm(a, false, a, false, c).ok());
  EXPECT_EQ(*c.ToVector<float>(), (std::vector<float>{7, 10, 15, 22}));
}

TEST(GemmTest, HalfTypesRoundOnceFromF32Accumulation) {
  const int m = 5, n = 6, k = 300;
  for (DType dtype : {DType::kF16, DType::kBF16, DType::kF64}) {
    std::vector<float> a = Random(m * k, 4), b = Random(k * n, 5);
    Tensor a32 = *Tensor::FromVector<float>(a, {m, k});
    Tensor b32 = *Tensor::FromVector<float>(b, {k, n});
    Tensor ah = *Tensor::Empty({m, k}, dtype), bh = *Tensor::Empty({k, n}, dtype);
    ASSERT_TRUE(Cast(a32, ah).ok());
    ASSERT_TRUE(Cast(b32, bh).ok());
    // The reference uses the rounded operands, multiplied exactly.
    Tensor ar = *Tensor::Empty({m, k}, DType::kF32), br = *Tensor::Empty({k, n}, DType::kF32);
    ASSERT_TRUE(Cast(ah, ar).ok());
    ASSERT_TRUE(Cast(bh, br).ok());
    std::vector<double> ref = Reference(*ar.ToVector<float>(), false, *br.ToVector<float>(), false, m, n, k);
    Tensor c = *Tensor::Empty({m, n}, dtype);
    ASSERT_TRUE(Gemm(ah, false, bh, false, c).ok()) << DTypeName(dtype);
    Tensor c32 = *Tensor::Empty({m, n}, DType::kF32);
    ASSERT_TRUE(Cast(c, c32).ok());
    std::vector<float> got = *c32.ToVector<float>();
    // One rounding of a value accumulated in f32: within one unit in the
    // last place of the result's format plus the f32 accumulation error.
    const double ulp = dtype == DType::kF16 ? 1.0 / 1024 : dtype == DType::kBF16 ? 1.0 / 128 : 1e-12;
    for (int i = 0; i < m * n; ++i) {
      EXPECT_NEAR(got[i], ref[i], std::fabs(ref[i]) * ulp + 1e-4) << DTypeName(dtype) << " " << i;
    }
  }
}

TEST(GemmTest, ShapeAndDTypeErrors) {
  Tensor a = *Tensor::Zeros({2, 3}, DType::kF32);
  Tensor b = *Tensor::Zeros({2, 3}, DType::kF32);
  Tensor c = *Tensor::Zeros({2, 2}, DType::kF32);
  absl::Status s = Gemm(a, false, b, false, c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("do not multiply"), absl::string_view::npos) << s;
  EXPECT_TRUE(Gemm(a, false, b, true, c).ok());
  Tensor i = *Tensor::Zeros({2, 3}, DType::kI32);
  EXPECT_EQ(Gemm(i, false, b, true, c).code(), absl::StatusCode::kInvalidArgument);
  Tensor one_d = *Tensor::Zeros({6}, DType::kF32);
  EXPECT_EQ(Gemm(one_d, false, b, true, c).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SetCpuMathThreads(0).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ReluTest, ForwardBackwardAndNaN) {
  Tensor x = *Tensor::FromVector<float>({-1.0f, 0.0f, 2.0f, NAN, -0.0f, 3.5f});
  Tensor y = *Tensor::Empty({6}, DType::kF32);
  ASSERT_TRUE(Relu(x, y).ok());
  std::vector<float> out = *y.ToVector<float>();
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[2], 2.0f);
  EXPECT_TRUE(std::isnan(out[3]));
  EXPECT_EQ(out[5], 3.5f);
  Tensor g = *Tensor::FromVector<float>({1, 1, 1, 1, 1, 1});
  Tensor gi = *Tensor::Empty({6}, DType::kF32);
  ASSERT_TRUE(ReluBackward(g, y, gi).ok());
  // threshold_backward: zero where out <= 0; NaN outputs pass the gradient.
  EXPECT_EQ(*gi.ToVector<float>(), (std::vector<float>{0, 0, 1, 1, 0, 1}));
}

TEST(ReluTest, HalfTypes) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    Tensor x32 = *Tensor::FromVector<float>({-2.0f, 0.5f, 3.0f});
    Tensor x = *Tensor::Empty({3}, dtype);
    ASSERT_TRUE(Cast(x32, x).ok());
    ASSERT_TRUE(Relu(x, x).ok());
    ASSERT_TRUE(Cast(x, x32).ok());
    EXPECT_EQ(*x32.ToVector<float>(), (std::vector<float>{0.0f, 0.5f, 3.0f}));
  }
}

// Every bf16 and f16 value: relu and threshold_backward on the bits agree
// with their definitions on the widened f32 values (NaN kept, -0 and -inf
// to +0; the gradient zeroed exactly where out <= 0).
TEST(ReluTest, HalfTypesEveryValue) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    std::vector<uint16_t> bits(65536);
    for (int i = 0; i < 65536; ++i) bits[static_cast<size_t>(i)] = static_cast<uint16_t>(i);
    Tensor x = *Tensor::Empty({65536}, dtype);
    std::memcpy(x.raw_data(), bits.data(), bits.size() * 2);
    Tensor x32 = *Tensor::Empty({65536}, DType::kF32);
    ASSERT_TRUE(Cast(x, x32).ok());
    Tensor y = *Tensor::Empty({65536}, dtype);
    ASSERT_TRUE(Relu(x, y).ok());
    // The gradient: a distinct nonzero value per element (its own bits with
    // the sign cleared, 1 for the zeros).
    Tensor g = *Tensor::Empty({65536}, dtype);
    std::vector<uint16_t> gbits(65536);
    for (int i = 0; i < 65536; ++i) gbits[static_cast<size_t>(i)] = static_cast<uint16_t>(std::max(i & 0x7fff, 1));
    std::memcpy(g.raw_data(), gbits.data(), gbits.size() * 2);
    Tensor gi = *Tensor::Empty({65536}, dtype);
    ASSERT_TRUE(ReluBackward(g, x, gi).ok());  // x as "out": every value, negative ones too
    const auto* yb = static_cast<const uint16_t*>(y.raw_data());
    const auto* gib = static_cast<const uint16_t*>(gi.raw_data());
    const float* v = x32.data<float>();
    for (int i = 0; i < 65536; ++i) {
      const uint16_t want_y = (v[i] > 0 || std::isnan(v[i])) ? bits[static_cast<size_t>(i)] : 0;
      ASSERT_EQ(yb[i], want_y) << DTypeName(dtype) << " relu of bits " << i << " (" << v[i] << ")";
      const uint16_t want_g = v[i] <= 0 ? 0 : gbits[static_cast<size_t>(i)];
      ASSERT_EQ(gib[i], want_g) << DTypeName(dtype) << " threshold_backward at bits " << i << " (" << v[i] << ")";
    }
  }
}

TEST(DropoutTest, KeepsAboutKeepProbabilityAndScales) {
  const int n = 100000;
  Tensor x = *Tensor::FromVector<float>(std::vector<float>(n, 1.0f));
  Tensor y = *Tensor::Empty({n}, DType::kF32);
  ASSERT_TRUE(DropoutApply(x, y, 0.8, 42, 0).ok());
  std::vector<float> out = *y.ToVector<float>();
  int kept = 0;
  for (float v : out) {
    ASSERT_TRUE(v == 0.0f || v == 1.25f) << v;
    kept += v != 0.0f;
  }
  // 0.8 of 1e5 with a binomial standard deviation of ~126: 8 sigma bounds.
  EXPECT_GT(kept, 80000 - 1000);
  EXPECT_LT(kept, 80000 + 1000);
  // Same (seed, offset) -> same mask; another offset -> another mask.
  Tensor y2 = *Tensor::Empty({n}, DType::kF32);
  ASSERT_TRUE(DropoutApply(x, y2, 0.8, 42, 0).ok());
  EXPECT_EQ(*y2.ToVector<float>(), out);
  ASSERT_TRUE(DropoutApply(x, y2, 0.8, 42, 1).ok());
  EXPECT_NE(*y2.ToVector<float>(), out);
  EXPECT_EQ(DropoutApply(x, y2, 0.0, 42, 1).code(), absl::StatusCode::kInvalidArgument);
}

TEST(WindowTest, Im2ColAndCol2ImAreAdjoint) {
  // <Im2Col(x), c> == <x, Col2Im(c)> for random x and c: col2im gathers
  // exactly the entries im2col scattered, padding and strides included.
  for (const Window2d& w : {Window2d{3, 3, 1, 1, 1, 1}, Window2d{3, 2, 2, 3, 1, 0}, Window2d{2, 2, 2, 2, 0, 0}}) {
    const int64_t c = 2, h = 7, wd = 6;
    Shape out = *WindowOutputSize(h, wd, w);
    const int64_t rows = c * w.kernel_h * w.kernel_w, cols = out[0] * out[1];
    std::vector<float> xv = Random(c * h * wd, 11), cv = Random(rows * cols, 12);
    Tensor x = *Tensor::FromVector<float>(xv, {c, h, wd});
    Tensor col = *Tensor::Empty({rows, cols}, DType::kF32);
    ASSERT_TRUE(Im2Col(x, w, col).ok());
    Tensor back = *Tensor::Empty({c, h, wd}, DType::kF32);
    ASSERT_TRUE(Col2Im(*Tensor::FromVector<float>(cv, {rows, cols}), w, back).ok());
    double lhs = 0, rhs = 0;
    std::vector<float> colv = *col.ToVector<float>(), backv = *back.ToVector<float>();
    for (size_t i = 0; i < colv.size(); ++i) lhs += double{colv[i]} * cv[i];
    for (size_t i = 0; i < backv.size(); ++i) rhs += double{xv[i]} * backv[i];
    EXPECT_NEAR(lhs, rhs, 1e-4) << w.kernel_h << "x" << w.kernel_w;
  }
  // A 1x1 kernel with stride 1 is the identity.
  Tensor x = *Tensor::FromVector<float>({1, 2, 3, 4}, {1, 2, 2});
  Tensor col = *Tensor::Empty({1, 4}, DType::kF32);
  ASSERT_TRUE(Im2Col(x, Window2d{}, col).ok());
  EXPECT_EQ(*col.ToVector<float>(), (std::vector<float>{1, 2, 3, 4}));
}

TEST(WindowTest, MaxPoolPicksFirstMaximumPropagatesNaNAndRoutesGradients) {
  // One 1x4x4 image, 2x2 windows, stride 2.
  Tensor x = *Tensor::FromVector<float>({1, 5, 2, 2, 5, 3, 2, 2, 0, NAN, 7, 1, NAN, 4, 1, 7}, {1, 1, 4, 4});
  Tensor y = *Tensor::Empty({1, 1, 2, 2}, DType::kF32);
  Tensor idx = *Tensor::Empty({1, 1, 2, 2}, DType::kI32);
  ASSERT_TRUE(MaxPool2dForward(x, Window2d{2, 2, 2, 2, 0, 0}, y, idx).ok());
  std::vector<float> out = *y.ToVector<float>();
  EXPECT_EQ(out[0], 5.0f);
  EXPECT_EQ(out[1], 2.0f);
  EXPECT_TRUE(std::isnan(out[2]));
  EXPECT_EQ(out[3], 7.0f);
  // First 5 (index 1, not 4), first 2 (index 2), the last NaN (index 12, as
  // PyTorch's CPU kernel), first 7 (index 10).
  EXPECT_EQ(*idx.ToVector<int32_t>(), (std::vector<int32_t>{1, 2, 12, 10}));
  Tensor g = *Tensor::FromVector<float>({10, 20, 30, 40}, {1, 1, 2, 2});
  Tensor gx = *Tensor::Empty({1, 1, 4, 4}, DType::kF32);
  ASSERT_TRUE(MaxPool2dBackward(g, idx, Window2d{2, 2, 2, 2, 0, 0}, gx).ok());
  EXPECT_EQ(*gx.ToVector<float>(), (std::vector<float>{0, 10, 20, 0, 0, 0, 0, 0, 0, 0, 40, 0, 30, 0, 0, 0}));
}

TEST(WindowTest, BadWindowsAreErrors) {
  EXPECT_FALSE(WindowOutputSize(2, 2, Window2d{3, 3, 1, 1, 0, 0}).ok());  // does not fit
  EXPECT_FALSE(WindowOutputSize(5, 5, Window2d{0, 3, 1, 1, 0, 0}).ok());
  EXPECT_FALSE(WindowOutputSize(5, 5, Window2d{3, 3, 0, 1, 0, 0}).ok());
  EXPECT_EQ(*WindowOutputSize(8, 8, Window2d{3, 3, 2, 2, 1, 1}), (Shape{4, 4}));
  Tensor x = *Tensor::Zeros({1, 1, 4, 4}, DType::kF32);
  Tensor y = *Tensor::Empty({1, 1, 4, 4}, DType::kF32);
  Tensor idx = *Tensor::Empty({1, 1, 4, 4}, DType::kI32);
  absl::Status s = MaxPool2dForward(x, Window2d{2, 2, 1, 1, 2, 2}, y, idx);
  EXPECT_NE(s.message().find("at most half of the kernel"), absl::string_view::npos) << s;
  s = MaxPool2dForward(x, Window2d{2, 2, 2, 2, 0, 0}, y, idx);
  EXPECT_NE(s.message().find("`out` must be f32[1, 1, 2, 2]"), absl::string_view::npos) << s;
}

// The CPU loops (clipped windows, scattered backward) give the same bits as
// the per-element formulation the CUDA kernels use, on inputs full of ties
// and NaNs, with overlapping, padded and strided windows.
TEST(WindowTest, MaxPoolCpuLoopsMatchThePerElementFormulation) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> small(0, 4);
  for (const Window2d& w : {Window2d{2, 2, 2, 2, 0, 0}, Window2d{3, 3, 2, 2, 1, 1}, Window2d{3, 3, 1, 1, 1, 1},
                            Window2d{2, 3, 1, 2, 1, 1}, Window2d{4, 4, 3, 3, 2, 2}}) {
    const int64_t n = 2, c = 3, h = 9, wd = 7;
    std::vector<float> xv(n * c * h * wd);
    for (float& v : xv) v = small(rng) == 0 && small(rng) == 0 ? NAN : static_cast<float>(small(rng));
    Tensor x = *Tensor::FromVector<float>(xv, {n, c, h, wd});
    const Shape out_hw = *WindowOutputSize(h, wd, w);
    window_elementwise::Geometry g{c,          h,       wd,      w.kernel_h, w.kernel_w, w.stride_h,
                                   w.stride_w, w.pad_h, w.pad_w, out_hw[0],  out_hw[1]};
    Tensor y = *Tensor::Empty({n, c, out_hw[0], out_hw[1]}, DType::kF32);
    Tensor idx = *Tensor::Empty({n, c, out_hw[0], out_hw[1]}, DType::kI32);
    ASSERT_TRUE(MaxPool2dForward(x, w, y, idx).ok());
    const int64_t per_out = c * out_hw[0] * out_hw[1], per_in = c * h * wd;
    for (int64_t i = 0; i < y.numel(); ++i) {
      int32_t want_index = 0;
      const float want = window_elementwise::MaxPoolAt(g, xv.data() + (i / per_out) * per_in, i % per_out, &want_index);
      ASSERT_EQ(idx.data<int32_t>()[i], want_index) << "window " << i;
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(y.data<float>()[i]));
      } else {
        ASSERT_EQ(y.data<float>()[i], want);
      }
    }
    const std::vector<float> gyv = Random(static_cast<size_t>(y.numel()), 5);
    Tensor gy = *Tensor::FromVector<float>(gyv, y.shape());
    Tensor gx = *Tensor::Empty(x.shape(), DType::kF32);
    ASSERT_TRUE(MaxPool2dBackward(gy, idx, w, gx).ok());
    for (int64_t i = 0; i < gx.numel(); ++i) {
      const int64_t image = i / per_in;
      const float want = window_elementwise::MaxPoolBackwardAt(g, gyv.data() + image * per_out,
                                                               idx.data<int32_t>() + image * per_out, i % per_in);
      ASSERT_EQ(std::memcmp(&gx.data<float>()[i], &want, sizeof want), 0)
          << "pixel " << i << ": " << gx.data<float>()[i] << " vs " << want;
    }
  }
}

TEST(WindowTest, MaxPoolBackwardRejectsForeignIndices) {
  Tensor gy = *Tensor::Zeros({1, 1, 2, 2}, DType::kF32);
  Tensor idx = *Tensor::FromVector<int32_t>({0, 1, 99, 2}, {1, 1, 2, 2});
  Tensor gx = *Tensor::Empty({1, 1, 4, 4}, DType::kF32);
  absl::Status s = MaxPool2dBackward(gy, idx, Window2d{2, 2, 2, 2, 0, 0}, gx);
  EXPECT_NE(s.message().find("index 99 of window 2 of plane 0 is outside the 4x4 input"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace lockstep
