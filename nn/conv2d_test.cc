// Conv2d's CPU kernels (oneDNN's primitives and the im2col + BLAS fallback)
// against nn/testing/error_bound's f64 reference, over a matrix of shapes:
// strides, paddings, 1x1 and kernel-sized inputs, odd sizes, with and
// without bias, and a batch size that changes between steps (an epoch's
// last batch) so cached primitives are re-made and reused.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/kernels.h"
#include "core/mt19937.h"
#include "core/status.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nn/conv2d.h"
#include "nn/init.h"
#include "nn/testing/error_bound.h"

namespace lockstep {
namespace {

namespace eb = error_bound;

struct Case {
  eb::ConvShape s;
  bool bias;
};

std::string Name(const Case& c) {
  return "n" + std::to_string(c.s.n) + " c" + std::to_string(c.s.c) + " " + std::to_string(c.s.h) + "x" +
         std::to_string(c.s.w) + " o" + std::to_string(c.s.o) + " k" + std::to_string(c.s.k) + " s" +
         std::to_string(c.s.stride) + " p" + std::to_string(c.s.pad) + (c.bias ? " bias" : " no bias");
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const eb::ConvShape& s : std::vector<eb::ConvShape>{
           {2, 3, 8, 8, 4, 3, 1, 1},     // the CNN's first layer, small
           {3, 2, 7, 9, 5, 3, 2, 1},     // stride 2, odd, non-square input
           {1, 1, 5, 5, 2, 5, 1, 2},     // kernel as large as the input
           {2, 16, 14, 14, 8, 3, 1, 1},  // the CNN's second layer's shape
           {2, 4, 6, 6, 3, 1, 1, 0},     // 1x1
           {2, 3, 9, 7, 4, 2, 2, 0},     // even kernel, no padding
           {5, 2, 4, 4, 3, 3, 3, 1},     // stride larger than padding
       }) {
    cases.push_back({s, true});
    cases.push_back({s, false});
  }
  return cases;
}

absl::StatusOr<Tensor> Random(const Shape& shape, Mt19937& gen) {
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(shape, DType::kF32, Device::Cpu()));
  LOCKSTEP_RETURN_IF_ERROR(UniformFill(t, -1.0, 1.0, gen));
  return t;
}

// One forward and backward of `conv` on a random input and output
// gradient, checked against the reference.
// A forward and backward of `conv` on a random input and output gradient
// (f32), the gradients cleared first.
struct Step {
  Tensor x, dy, y, dx;
};
void RunStep(Conv2d& conv, const eb::ConvShape& s, Mt19937& gen, Step* out) {
  absl::StatusOr<Tensor> x = Random({s.n, s.c, s.h, s.w}, gen);
  absl::StatusOr<Tensor> dy = Random({s.n, s.o, s.out_h(), s.out_w()}, gen);
  ASSERT_TRUE(x.ok() && dy.ok());
  conv.weight().grad = Tensor();
  conv.bias().grad = Tensor();
  absl::StatusOr<Tensor> y = conv.Forward(*x);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->shape(), (Shape{s.n, s.o, s.out_h(), s.out_w()}));
  absl::StatusOr<Tensor> dx = conv.Backward(*dy);
  ASSERT_TRUE(dx.ok()) << dx.status();
  *out = Step{*x, *dy, *y, *dx};
}

void CheckStep(Conv2d& conv, const Case& c, Mt19937& gen) {
  SCOPED_TRACE(Name(c));
  const eb::ConvShape& s = c.s;
  Step step;
  ASSERT_NO_FATAL_FAILURE(RunStep(conv, s, gen, &step));
  const Tensor *x = &step.x, *dy = &step.dy, *y = &step.y, *dx = &step.dx;

  const eb::Matrix mx = eb::FromTensor(*x);
  const eb::Matrix mw = eb::FromTensor(conv.weight().value);
  eb::Matrix mb(1, s.o);
  if (c.bias) mb = eb::FromTensor(conv.bias().value);  // else exact zeros
  const eb::Matrix want_y = eb::ConvForward(s, mx, mw, mb);
  const eb::LinearGrads want = eb::ConvBackward(s, mx, mw, eb::FromTensor(*dy), /*input_grad=*/true);
  EXPECT_TRUE(eb::ExpectWithin(*y, want_y, "output").ok()) << eb::ExpectWithin(*y, want_y, "output");
  EXPECT_TRUE(eb::ExpectWithin(*dx, want.dx, "input grad").ok()) << eb::ExpectWithin(*dx, want.dx, "input grad");
  EXPECT_TRUE(eb::ExpectWithin(conv.weight().grad, want.dw, "weight grad").ok())
      << eb::ExpectWithin(conv.weight().grad, want.dw, "weight grad");
  if (c.bias) {
    EXPECT_TRUE(eb::ExpectWithin(conv.bias().grad, want.db, "bias grad").ok())
        << eb::ExpectWithin(conv.bias().grad, want.db, "bias grad");
  } else {
    EXPECT_FALSE(conv.bias().grad.defined());
  }
}

absl::StatusOr<std::unique_ptr<Conv2d>> Make(const Case& c, Mt19937& gen) {
  Conv2dOptions o;
  o.in_channels = c.s.c;
  o.out_channels = c.s.o;
  o.kernel_h = o.kernel_w = c.s.k;
  o.stride_h = o.stride_w = c.s.stride;
  o.pad_h = o.pad_w = c.s.pad;
  o.bias = c.bias;
  return Conv2d::Create(o, gen);
}

void CheckAllCases() {
  Mt19937 gen(7);
  for (const Case& c : Cases()) {
    absl::StatusOr<std::unique_ptr<Conv2d>> conv = Make(c, gen);
    ASSERT_TRUE(conv.ok()) << conv.status();
    CheckStep(**conv, c, gen);
    // The same shape again: the cached primitives, on new values.
    CheckStep(**conv, c, gen);
  }
}

TEST(Conv2dTest, DefaultKernelsMatchTheReference) { CheckAllCases(); }

TEST(Conv2dTest, FallbackKernelsMatchTheReference) {
  ASSERT_EQ(setenv("LOCKSTEP_NO_DNNL", "1", 1), 0);
#ifdef LOCKSTEP_EXPECT_DNNL
  EXPECT_EQ(Conv2d::CpuKernels(), "im2col + BLAS per image (LOCKSTEP_NO_DNNL=1)");
#else
  EXPECT_THAT(Conv2d::CpuKernels(), ::testing::StartsWith("im2col + BLAS per image (lockstep was built without"));
#endif
  CheckAllCases();
  ASSERT_EQ(unsetenv("LOCKSTEP_NO_DNNL"), 0);
}

// Autocast: one step of a Conv2d computing in `dtype` on f32 input and
// output gradient, against the f32 reference on the operands rounded to
// `dtype` (what autocast's copies hold), each result rounded once more.
void CheckRoundedStep(Conv2d& conv, const Case& c, DType dtype, Mt19937& gen) {
  SCOPED_TRACE(Name(c) + " " + std::string(DTypeName(dtype)));
  const eb::ConvShape& s = c.s;
  Step step;
  ASSERT_NO_FATAL_FAILURE(RunStep(conv, s, gen, &step));
  const Tensor *x = &step.x, *dy = &step.dy, *y = &step.y, *dx = &step.dx;
  ASSERT_EQ(y->dtype(), dtype);
  ASSERT_EQ(dx->dtype(), DType::kF32);  // the input's dtype
  ASSERT_EQ(conv.weight().grad.dtype(), DType::kF32);

  const eb::Matrix mx = eb::FromTensor(eb::RoundedValues(*x, dtype));
  const eb::Matrix mw = eb::FromTensor(eb::RoundedValues(conv.weight().value, dtype));
  eb::Matrix mb(1, s.o);
  if (c.bias) mb = eb::FromTensor(eb::RoundedValues(conv.bias().value, dtype));
  const eb::Matrix want_y = eb::RoundedTo(dtype, eb::ConvForward(s, mx, mw, mb));
  const eb::LinearGrads want =
      eb::ConvBackward(s, mx, mw, eb::FromTensor(eb::RoundedValues(*dy, dtype)), /*input_grad=*/true);
  const Tensor y32 = eb::WidenedToF32(*y);
  EXPECT_TRUE(eb::ExpectWithin(y32, want_y, "output").ok()) << eb::ExpectWithin(y32, want_y, "output");
  const eb::Matrix want_dx = eb::RoundedTo(dtype, want.dx), want_dw = eb::RoundedTo(dtype, want.dw);
  EXPECT_TRUE(eb::ExpectWithin(*dx, want_dx, "input grad").ok()) << eb::ExpectWithin(*dx, want_dx, "input grad");
  EXPECT_TRUE(eb::ExpectWithin(conv.weight().grad, want_dw, "weight grad").ok())
      << eb::ExpectWithin(conv.weight().grad, want_dw, "weight grad");
  if (c.bias) {
    const eb::Matrix want_db = eb::RoundedTo(dtype, want.db);
    EXPECT_TRUE(eb::ExpectWithin(conv.bias().grad, want_db, "bias grad").ok())
        << eb::ExpectWithin(conv.bias().grad, want_db, "bias grad");
  }
  // Rounded results, not f32 ones passed through: the values are dtype's.
  const Tensor again = eb::RoundedValues(y32, dtype);
  EXPECT_EQ(*again.ToVector<float>(), *y32.ToVector<float>());
}

void CheckAllCasesIn(DType dtype) {
  Mt19937 gen(13);
  for (const Case& c : Cases()) {
    absl::StatusOr<std::unique_ptr<Conv2d>> conv = Make(c, gen);
    ASSERT_TRUE(conv.ok()) << conv.status();
    ASSERT_TRUE((*conv)->set_compute_dtype(dtype).ok());
    CheckRoundedStep(**conv, c, dtype, gen);
    CheckRoundedStep(**conv, c, dtype, gen);
  }
}

TEST(Conv2dTest, Bf16MatchesTheRoundedReference) { CheckAllCasesIn(DType::kBF16); }

// f16 has no oneDNN CPU convolution: the fallback runs it.
TEST(Conv2dTest, F16MatchesTheRoundedReference) { CheckAllCasesIn(DType::kF16); }

TEST(Conv2dTest, Bf16FallbackMatchesTheRoundedReference) {
  ASSERT_EQ(setenv("LOCKSTEP_NO_DNNL", "1", 1), 0);
  CheckAllCasesIn(DType::kBF16);
  ASSERT_EQ(unsetenv("LOCKSTEP_NO_DNNL"), 0);
}

TEST(Conv2dTest, Bf16InputGivesABf16InputGradient) {
  Mt19937 gen(17);
  Case c{{2, 3, 6, 6, 4, 3, 1, 1}, true};
  std::unique_ptr<Conv2d> conv = *Make(c, gen);
  ASSERT_TRUE(conv->set_compute_dtype(DType::kBF16).ok());
  Tensor x = eb::RoundedValues(*Random({2, 3, 6, 6}, gen), DType::kBF16);
  Tensor xb = *Tensor::Empty(x.shape(), DType::kBF16, Device::Cpu());
  ASSERT_TRUE(Cast(x, xb).ok());
  absl::StatusOr<Tensor> y = conv->Forward(xb);
  ASSERT_TRUE(y.ok()) << y.status();
  absl::StatusOr<Tensor> dx = conv->Backward(*y);
  ASSERT_TRUE(dx.ok()) << dx.status();
  EXPECT_EQ(dx->dtype(), DType::kBF16);
  EXPECT_EQ(dx->shape(), x.shape());
  EXPECT_FALSE(conv->set_compute_dtype(DType::kF64).ok());
}

// Bad input gets an error naming what was expected, and a refused
// gradient leaves the pending Forward in place: the right one still works.
TEST(Conv2dTest, RefusesBadDtypesAndKeepsThePendingForward) {
  Mt19937 gen(19);
  Case c{{2, 3, 6, 6, 4, 3, 1, 1}, true};
  Conv2dOptions bad;
  bad.in_channels = 3;
  bad.out_channels = 4;
  bad.compute_dtype = DType::kF64;
  absl::StatusOr<std::unique_ptr<Conv2d>> refused = Conv2d::Create(bad, gen);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("f32, bf16 or f16"), absl::string_view::npos) << refused.status();
  for (DType compute : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(std::string(DTypeName(compute)));
    std::unique_ptr<Conv2d> conv = *Make(c, gen);
    ASSERT_TRUE(conv->set_compute_dtype(compute).ok());
    absl::StatusOr<Tensor> y = conv->Forward(*Tensor::Zeros({2, 3, 6, 6}, DType::kI32));
    EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(y.status().message().find("expected an f32, bf16 or f16 [batch, 3, height, width]"),
              absl::string_view::npos)
        << y.status();
    y = conv->Forward(*Random({2, 3, 6, 6}, gen));
    ASSERT_TRUE(y.ok()) << y.status();
    for (const Tensor& g : {*Tensor::Zeros({2, 4, 6, 6}, DType::kF64), *Tensor::Zeros({2, 4, 5, 6}, DType::kF32)}) {
      absl::StatusOr<Tensor> dx = conv->Backward(g);
      EXPECT_EQ(dx.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(dx.status().message().find("gradient of shape [2, 4, 6, 6]"), absl::string_view::npos) << dx.status();
    }
    EXPECT_FALSE(conv->weight().grad.defined());
    absl::StatusOr<Tensor> dx = conv->Backward(*Random({2, 4, 6, 6}, gen));
    ASSERT_TRUE(dx.ok()) << dx.status();
    EXPECT_TRUE(conv->weight().grad.defined());
  }
}

TEST(Conv2dTest, BatchSizeChangesBetweenSteps) {
  // 4, 4, 3 (an epoch's last batch), 4, 1, 4: more shapes than the cache
  // keeps, so some are evicted and made again.
  Mt19937 gen(11);
  Case c{{4, 3, 10, 10, 6, 3, 1, 1}, true};
  absl::StatusOr<std::unique_ptr<Conv2d>> conv = Make(c, gen);
  ASSERT_TRUE(conv.ok()) << conv.status();
  for (int64_t n : {4, 4, 3, 4, 1, 2, 5, 6, 4}) {
    c.s.n = n;
    CheckStep(**conv, c, gen);
  }
}

TEST(Conv2dTest, SaysWhichKernelsRun) {
  const std::string kernels = Conv2d::CpuKernels();
#ifdef LOCKSTEP_EXPECT_DNNL
  // Built with @local_dnnl: oneDNN must be what runs, not a silent fallback.
  EXPECT_EQ(kernels.rfind("oneDNN ", 0), 0u) << kernels;
#else
  EXPECT_NE(kernels.find("built without oneDNN"), std::string::npos) << kernels;
#endif
}

}  // namespace
}  // namespace lockstep
