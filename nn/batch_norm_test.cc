// BatchNorm1d/2d against PyTorch 1.13 (nn/testdata/make_batchnorm_golden.py):
// outputs, gradients and running statistics in training and eval mode within
// the radius nn/testing/error_bound.h derives (ours and PyTorch's both), state
// dict names and order; a named Sequential that loads a
// PyTorch state dict strictly; option and input errors.
#include "nn/batch_norm.h"

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/kernels.h"
#include "gtest/gtest.h"
#include "nn/checkpoint/safetensors.h"
#include "nn/linear.h"
#include "nn/max_pool2d.h"
#include "nn/relu.h"
#include "nn/sequential.h"
#include "nn/testing/batch_norm_reference.h"
#include "nn/testing/error_bound.h"

namespace lockstep {
namespace {

constexpr char kGolden[] = "nn/testdata/batchnorm_golden.safetensors";

class BatchNormGoldenTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<SafetensorsFile> file = ReadSafetensorsFile(kGolden);
    ASSERT_TRUE(file.ok()) << file.status();
    golden_ = new SafetensorsFile(*std::move(file));
    for (const auto& [name, t] : golden_->tensors) index_[name] = t;
  }
  static void TearDownTestSuite() {
    delete golden_;
    index_.clear();
  }

  static Tensor G(const std::string& name) {
    auto it = index_.find(name);
    if (it == index_.end()) {
      ADD_FAILURE() << "golden file has no tensor '" << name << "'";
      return Tensor();
    }
    return it->second;
  }
  static std::string Meta(const std::string& key) { return golden_->metadata[key]; }

  static SafetensorsFile* golden_;
  static std::map<std::string, Tensor> index_;
};

SafetensorsFile* BatchNormGoldenTest::golden_ = nullptr;
std::map<std::string, Tensor> BatchNormGoldenTest::index_;

// |actual - expected| <= 1e-5 * |expected| + 1e-6 elementwise (the absolute
// term only matters for values that are 0 up to rounding, e.g. a sum of
// normalized values).
void ExpectClose(const Tensor& actual, const Tensor& expected, const std::string& what) {
  ASSERT_TRUE(actual.defined()) << what;
  ASSERT_TRUE(expected.defined()) << what;
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  std::vector<float> a = *actual.ToVector<float>();
  std::vector<float> e = *expected.ToVector<float>();
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double tol = 1e-5 * std::fabs(e[i]) + 1e-6;
    if (!(std::fabs(static_cast<double>(a[i]) - e[i]) <= tol) && bad++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: lockstep " << a[i] << " vs PyTorch " << e[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << a.size() << " elements differ";
}

// As json.dumps(list_of_names).
std::string JsonList(const std::vector<std::string>& names) { return "[\"" + absl::StrJoin(names, "\", \"") + "\"]"; }

std::vector<std::string> StateNames(Module& m) {
  std::vector<std::string> names;
  for (const NamedTensor& t : m.StateDict()) names.push_back(t.first);
  return names;
}

std::unique_ptr<BatchNorm> Make(const std::string& key) {
  BatchNormOptions o;
  o.num_features = 3;
  if (key == "bn2d_cma") o.momentum = std::nullopt;
  if (key.rfind("bn1d", 0) == 0) {
    absl::StatusOr<std::unique_ptr<BatchNorm1d>> b = BatchNorm1d::Create(o);
    if (!b.ok()) return nullptr;
    return *std::move(b);
  }
  absl::StatusOr<std::unique_ptr<BatchNorm2d>> b = BatchNorm2d::Create(o);
  if (!b.ok()) return nullptr;
  return *std::move(b);
}

namespace eb = error_bound;

void ExpectBothWithin(const Tensor& ours, const Tensor& pytorch, const eb::Matrix& want, const std::string& what) {
  absl::Status s = eb::ExpectWithin(ours, want, "lockstep's " + what);
  EXPECT_TRUE(s.ok()) << s;
  s = eb::ExpectWithin(pytorch, want, "PyTorch's " + what);
  EXPECT_TRUE(s.ok()) << s;
}

// Each step starts from PyTorch's running statistics after the step before.
TEST_F(BatchNormGoldenTest, TrainThenEvalMatchesPyTorch) {
  for (const std::string key : {"bn1d", "bn1d_3d", "bn2d", "bn2d_cma"}) {
    SCOPED_TRACE(key);
    std::unique_ptr<BatchNorm> bn = Make(key);
    ASSERT_NE(bn, nullptr);
    EXPECT_EQ(JsonList(StateNames(*bn)), Meta(key + ".state_dict_keys"));
    ASSERT_TRUE(bn->weight().value.CopyFrom(G(key + ".weight")).ok());
    ASSERT_TRUE(bn->bias().value.CopyFrom(G(key + ".bias")).ok());
    Tensor mean_prev = *Tensor::Zeros({3}, DType::kF32);
    Tensor var_prev = *Tensor::FromVector<float>({1.0f, 1.0f, 1.0f});
    int t = 0;
    for (const std::string step : {"train0", "train1", "train2", "eval"}) {
      const std::string p = key + "." + step + ".";
      const bool training = step != "eval";
      if (!training) bn->Eval();
      ASSERT_TRUE(bn->running_mean().CopyFrom(mean_prev).ok());
      ASSERT_TRUE(bn->running_var().CopyFrom(var_prev).ok());
      // momentum 0.1, or the cumulative average 1 / num_batches_tracked.
      const double factor = key == "bn2d_cma" ? 1.0 / static_cast<double>(t + 1) : 0.1;
      const BatchNormReference ref = BatchNormStep(G(p + "x"), G(p + "g"), G(key + ".weight"), G(key + ".bias"),
                                                   mean_prev, var_prev, training, factor);
      ASSERT_TRUE(bn->ZeroGrad(/*set_to_none=*/true).ok());
      absl::StatusOr<Tensor> y = bn->Forward(G(p + "x"));
      ASSERT_TRUE(y.ok()) << y.status();
      ExpectBothWithin(*y, G(p + "y"), ref.y, p + "y");
      absl::StatusOr<Tensor> gx = bn->Backward(G(p + "g"));
      ASSERT_TRUE(gx.ok()) << gx.status();
      ExpectBothWithin(*gx, G(p + "grad_input"), ref.grad_input, p + "grad_input");
      ExpectBothWithin(bn->weight().grad, G(p + "grad_weight"), ref.grad_weight, p + "grad_weight");
      ExpectBothWithin(bn->bias().grad, G(p + "grad_bias"), ref.grad_bias, p + "grad_bias");
      if (training) {
        ExpectBothWithin(bn->running_mean(), G(p + "running_mean"), ref.running_mean, p + "running_mean");
        ExpectBothWithin(bn->running_var(), G(p + "running_var"), ref.running_var, p + "running_var");
        EXPECT_EQ(*bn->num_batches_tracked().ToVector<int64_t>(), *G(p + "num_batches_tracked").ToVector<int64_t>());
        mean_prev = G(p + "running_mean");
        var_prev = G(p + "running_var");
        ++t;
      }
    }
    // Eval mode left the running statistics alone.
    EXPECT_EQ(*bn->running_mean().ToVector<float>(), *G(key + ".train2.running_mean").ToVector<float>());
    EXPECT_EQ((*bn->num_batches_tracked().ToVector<int64_t>())[0], 3);
  }
}

TEST_F(BatchNormGoldenTest, NamedSequentialLoadsATorchStateDictStrictly) {
  auto seq = std::make_unique<Sequential>();
  LinearOptions fc;
  fc.in_features = 4, fc.out_features = 3;
  absl::StatusOr<std::unique_ptr<Linear>> linear = Linear::Create(fc);  // no generator
  ASSERT_TRUE(linear.ok()) << linear.status();
  const std::vector<float> zeros = *(*linear)->weight().value.ToVector<float>();
  for (float v : zeros) EXPECT_EQ(v, 0.0f);
  ASSERT_TRUE(seq->Add("fc1", *std::move(linear)).ok());
  BatchNormOptions bo;
  bo.num_features = 3;
  absl::StatusOr<BatchNorm1d*> bn = seq->Add("bn", *BatchNorm1d::Create(bo));
  ASSERT_TRUE(bn.ok()) << bn.status();
  ASSERT_TRUE(seq->Add("relu", std::make_unique<ReLU>()).ok());
  EXPECT_EQ(JsonList(StateNames(*seq)), Meta("seq.state_dict_keys"));

  std::vector<NamedTensor> state;
  for (const auto& [name, t] : golden_->tensors) {
    if (name.rfind("seq.", 0) == 0 && name != "seq.x" && name != "seq.y") {
      state.emplace_back(name.substr(4), t);
    }
  }
  ASSERT_TRUE(seq->LoadStateDict(state, /*strict=*/true).ok());
  EXPECT_EQ((*(*bn)->num_batches_tracked().ToVector<int64_t>())[0], 1);
  seq->Eval();
  absl::StatusOr<Tensor> y = seq->Forward(G("seq.x"));
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectClose(*y, G("seq.y"), "seq.y");

  // A deep copy keeps the names.
  absl::StatusOr<std::unique_ptr<Module>> copy = seq->CloneTo(Device::Cpu());
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(StateNames(**copy), StateNames(*seq));
}

TEST(BatchNormTest, OptionsWithoutAffineOrRunningStats) {
  BatchNormOptions o;
  o.num_features = 2;
  o.affine = false;
  o.track_running_stats = false;
  std::unique_ptr<BatchNorm1d> bn = *BatchNorm1d::Create(o);
  EXPECT_TRUE(bn->StateDict().empty());
  bn->Eval();  // without running statistics, eval mode still uses the batch's
  Tensor x = *Tensor::FromVector<float>({1, 10, 3, 20, 5, 30}, {3, 2});
  std::vector<float> y = *bn->Forward(x)->ToVector<float>();
  const float s = static_cast<float>(1.0 / std::sqrt(8.0 / 3.0 + 1e-5));
  EXPECT_NEAR(y[0], -2.0f * s, 1e-6);
  EXPECT_NEAR(y[2], 0.0f, 1e-6);
  EXPECT_NEAR(y[4], 2.0f * s, 1e-6);
  absl::StatusOr<Tensor> gx = bn->Backward(*Tensor::Zeros({3, 2}, DType::kF32));
  ASSERT_TRUE(gx.ok()) << gx.status();
}

// `t` in `dtype`.
Tensor As(const Tensor& t, DType dtype) {
  Tensor out = *Tensor::Empty(t.shape(), dtype, t.device());
  EXPECT_TRUE(Cast(t, out).ok());
  return out;
}

// Autocast's bf16 activations: PyTorch 1.13's mixed-type batch_norm (bf16
// input, f32 parameters and buffers) returns exactly the f32 computation on
// the widened input, rounded once (checked against torch when this was
// written: every forward value equal). So: a bf16 module step equals an f32
// twin's step on the widened values, output and input gradient rounded,
// weight/bias gradients and running statistics f32 and identical.
TEST(BatchNormTest, Bf16InputIsTheF32ComputationRoundedOnce) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    BatchNormOptions o;
    o.num_features = 5;
    std::unique_ptr<BatchNorm2d> narrow = *BatchNorm2d::Create(o);
    std::unique_ptr<BatchNorm2d> wide = *BatchNorm2d::Create(o);
    std::vector<float> xs(3 * 5 * 7 * 6), gs(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) {
      xs[i] = 2.5f * std::sin(0.37f * static_cast<float>(i)) + 0.5f;
      gs[i] = std::cos(0.91f * static_cast<float>(i));
    }
    // Values already in dtype, so both modules see the same numbers.
    const Tensor x = As(*Tensor::FromVector<float>(xs, {3, 5, 7, 6}), dtype);
    const Tensor g = As(*Tensor::FromVector<float>(gs, {3, 5, 7, 6}), dtype);
    for (int step = 0; step < 2; ++step) {
      absl::StatusOr<Tensor> y = narrow->Forward(x);
      ASSERT_TRUE(y.ok()) << y.status();
      ASSERT_EQ(y->dtype(), dtype);
      absl::StatusOr<Tensor> y32 = wide->Forward(As(x, DType::kF32));
      ASSERT_TRUE(y32.ok()) << y32.status();
      EXPECT_EQ(*As(*y, DType::kF32).ToVector<float>(), *As(As(*y32, dtype), DType::kF32).ToVector<float>());
      absl::StatusOr<Tensor> dx = narrow->Backward(g);
      ASSERT_TRUE(dx.ok()) << dx.status();
      ASSERT_EQ(dx->dtype(), dtype);
      absl::StatusOr<Tensor> dx32 = wide->Backward(As(g, DType::kF32));
      ASSERT_TRUE(dx32.ok()) << dx32.status();
      EXPECT_EQ(*As(*dx, DType::kF32).ToVector<float>(), *As(As(*dx32, dtype), DType::kF32).ToVector<float>());
      EXPECT_EQ(narrow->weight().grad.dtype(), DType::kF32);
      EXPECT_EQ(*narrow->weight().grad.ToVector<float>(), *wide->weight().grad.ToVector<float>());
      EXPECT_EQ(*narrow->bias().grad.ToVector<float>(), *wide->bias().grad.ToVector<float>());
      EXPECT_EQ(*narrow->running_mean().ToVector<float>(), *wide->running_mean().ToVector<float>());
      EXPECT_EQ(*narrow->running_var().ToVector<float>(), *wide->running_var().ToVector<float>());
    }
    narrow->Eval();
    wide->Eval();
    EXPECT_EQ(*As(*narrow->Forward(x), DType::kF32).ToVector<float>(),
              *As(As(*wide->Forward(As(x, DType::kF32)), dtype), DType::kF32).ToVector<float>());
  }
}

// MaxPool2d keeps bf16: the maxima are input values, and a pixel's
// gradient from overlapping windows is summed in f32 and rounded once.
TEST(MaxPool2dTest, Bf16InAndOut) {
  std::vector<float> xs(2 * 3 * 7 * 7);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(1.3f * static_cast<float>(i));
  const Tensor x = As(*Tensor::FromVector<float>(xs, {2, 3, 7, 7}), DType::kBF16);
  MaxPool2d narrow(3, 2, 1), wide(3, 2, 1);  // overlapping windows
  absl::StatusOr<Tensor> y = narrow.Forward(x);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->dtype(), DType::kBF16);
  absl::StatusOr<Tensor> y32 = wide.Forward(As(x, DType::kF32));
  ASSERT_TRUE(y32.ok()) << y32.status();
  EXPECT_EQ(*As(*y, DType::kF32).ToVector<float>(), *y32->ToVector<float>());
  std::vector<float> gs(static_cast<size_t>(y->numel()));
  for (size_t i = 0; i < gs.size(); ++i) gs[i] = std::cos(0.7f * static_cast<float>(i));
  const Tensor g = As(*Tensor::FromVector<float>(gs, y->shape()), DType::kBF16);
  absl::StatusOr<Tensor> dx = narrow.Backward(g);
  ASSERT_TRUE(dx.ok()) << dx.status();
  ASSERT_EQ(dx->dtype(), DType::kBF16);
  absl::StatusOr<Tensor> dx32 = wide.Backward(As(g, DType::kF32));
  ASSERT_TRUE(dx32.ok()) << dx32.status();
  EXPECT_EQ(*As(*dx, DType::kF32).ToVector<float>(), *As(As(*dx32, DType::kBF16), DType::kF32).ToVector<float>());
  EXPECT_FALSE(narrow.Forward(*Tensor::Zeros({1, 1, 4, 4}, DType::kI32)).ok());
  // A refused gradient leaves the pending Forward for the right one.
  ASSERT_TRUE(narrow.Forward(x).ok());
  EXPECT_EQ(narrow.Backward(*Tensor::Zeros(y->shape(), DType::kI32)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(narrow.Backward(g).ok());
}

TEST(BatchNormTest, Errors) {
  BatchNormOptions o;
  EXPECT_EQ(BatchNorm2d::Create(o).status().code(), absl::StatusCode::kInvalidArgument);  // 0 features
  o.num_features = 2;
  o.momentum = 1.5;
  EXPECT_EQ(BatchNorm1d::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.momentum = 0.1;
  std::unique_ptr<BatchNorm1d> bn1 = *BatchNorm1d::Create(o);
  std::unique_ptr<BatchNorm2d> bn2 = *BatchNorm2d::Create(o);
  absl::StatusOr<Tensor> y = bn1->Forward(*Tensor::Zeros({2, 2, 2, 2}, DType::kF32));
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(y.status().message().find("BatchNorm1d(2).Forward: expected 2D or 3D"), absl::string_view::npos)
      << y.status();
  EXPECT_FALSE(bn2->Forward(*Tensor::Zeros({2, 2}, DType::kF32)).ok());
  EXPECT_FALSE(bn2->Forward(*Tensor::Zeros({2, 3, 2, 2}, DType::kF32)).ok());  // channels
  // One value per channel cannot be normalized in training, and nothing changes.
  y = bn1->Forward(*Tensor::Zeros({1, 2}, DType::kF32));
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(y.status().message().find("more than 1 value per channel"), absl::string_view::npos) << y.status();
  EXPECT_EQ((*bn1->num_batches_tracked().ToVector<int64_t>())[0], 0);
  bn1->Eval();
  EXPECT_TRUE(bn1->Forward(*Tensor::Zeros({1, 2}, DType::kF32)).ok());  // fine in eval
  EXPECT_EQ(bn2->Backward(*Tensor::Zeros({2, 2, 2, 2}, DType::kF32)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A refused gradient (wrong dtype, then wrong shape) leaves the pending
  // Forward for the right one.
  ASSERT_TRUE(bn2->Forward(*Tensor::Zeros({2, 2, 2, 2}, DType::kF32)).ok());
  absl::StatusOr<Tensor> gx = bn2->Backward(*Tensor::Zeros({2, 2, 2, 2}, DType::kF64));
  EXPECT_EQ(gx.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(gx.status().message().find("expected an f32, bf16 or f16 gradient of shape [2, 2, 2, 2]"),
            absl::string_view::npos)
      << gx.status();
  EXPECT_FALSE(bn2->Backward(*Tensor::Zeros({2, 2, 2, 3}, DType::kF32)).ok());
  EXPECT_TRUE(bn2->Backward(*Tensor::Zeros({2, 2, 2, 2}, DType::kF32)).ok());
}

TEST(SequentialTest, NamedChildrenAreValidated) {
  Sequential seq;
  seq.Add(std::make_unique<ReLU>());  // "0"
  absl::StatusOr<ReLU*> a = seq.Add("act", std::make_unique<ReLU>());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, &seq.child(1));
  for (const std::string bad : {"", "a.b", "act", "0", "12"}) {
    absl::StatusOr<ReLU*> r = seq.Add(bad, std::make_unique<ReLU>());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  seq.Add(std::make_unique<ReLU>());  // positional again: "2", as torch's append
  ASSERT_EQ(seq.size(), 3u);
  EXPECT_EQ(seq.child_name(0), "0");
  EXPECT_EQ(seq.child_name(1), "act");
  EXPECT_EQ(seq.child_name(2), "2");
}

}  // namespace
}  // namespace lockstep
