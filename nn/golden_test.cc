// The MLP of nn/testdata/make_nn_golden.py against PyTorch 1.13: initial
// weights bit for bit, then logits, loss, every gradient and the parameters
// after three steps of each optimizer within 1e-5 relative.
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mt19937.h"
#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/conv2d.h"
#include "nn/flatten.h"
#include "nn/max_pool2d.h"
#include "nn/relu.h"
#include "nn/cross_entropy.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "nn/safetensors.h"
#include "nn/sgd.h"

namespace lockstep {
namespace {

constexpr char kGolden[] = "nn/testdata/mlp_golden.safetensors";

class GoldenTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<SafetensorsFile> file = ReadSafetensorsFile(kGolden);
    ASSERT_TRUE(file.ok()) << file.status();
    golden_ = new std::map<std::string, Tensor>(file->tensors.begin(), file->tensors.end());
    metadata_ = new std::map<std::string, std::string>(file->metadata);
  }
  static void TearDownTestSuite() {
    delete golden_;
    delete metadata_;
  }

  static const Tensor& G(const std::string& name) {
    auto it = golden_->find(name);
    if (it == golden_->end()) {
      ADD_FAILURE() << "golden file has no tensor '" << name << "'";
      static const Tensor kNone;
      return kNone;
    }
    return it->second;
  }

  static std::unique_ptr<Sequential> Model() {
    Mt19937 gen(0);  // torch.manual_seed(0)
    MlpOptions options;
    options.sizes = {20, 16, 12, 5};
    absl::StatusOr<std::unique_ptr<Sequential>> model = MakeMlp(options, gen);
    EXPECT_TRUE(model.ok()) << model.status();
    return model.ok() ? *std::move(model) : nullptr;
  }

  static std::map<std::string, std::string>* metadata_;

 private:
  static std::map<std::string, Tensor>* golden_;
};

std::map<std::string, Tensor>* GoldenTest::golden_ = nullptr;
std::map<std::string, std::string>* GoldenTest::metadata_ = nullptr;

// |actual - expected| <= 1e-5 * |expected| + 1e-7 elementwise (the absolute
// term only matters for values that are 0 up to rounding).
void ExpectClose(const Tensor& actual, const Tensor& expected, const std::string& what) {
  ASSERT_TRUE(actual.defined()) << what;
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  std::vector<float> a = *actual.ToVector<float>();
  std::vector<float> e = *expected.ToVector<float>();
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double tol = 1e-5 * std::fabs(e[i]) + 1e-7;
    if (!(std::fabs(static_cast<double>(a[i]) - e[i]) <= tol) && bad++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: lockstep " << a[i] << " vs PyTorch " << e[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << a.size() << " elements differ";
}

TEST_F(GoldenTest, InitialWeightsAreBitIdentical) {
  std::unique_ptr<Sequential> model = Model();
  std::vector<NamedParameter> params = model->NamedParameters();
  ASSERT_EQ(params.size(), 6u);
  const std::vector<std::string> names = {"1.weight", "1.bias", "3.weight", "3.bias", "5.weight", "5.bias"};
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].name, names[i]);
    EXPECT_EQ(*params[i].parameter->value.ToVector<float>(), *G("init." + names[i]).ToVector<float>())
        << names[i];
  }
}

TEST_F(GoldenTest, InitOfA784By512LinearIsBitIdentical) {
  Mt19937 gen(1);
  LinearOptions options;
  options.in_features = 784;
  options.out_features = 512;
  absl::StatusOr<std::unique_ptr<Linear>> fc = Linear::Create(options, gen);
  ASSERT_TRUE(fc.ok()) << fc.status();
  std::vector<float> w = *(*fc)->weight().value.ToVector<float>();
  std::vector<float> head(w.begin(), w.begin() + 64), tail(w.end() - 64, w.end());
  EXPECT_EQ(head, *G("big.weight_head").ToVector<float>());
  EXPECT_EQ(tail, *G("big.weight_tail").ToVector<float>());
  EXPECT_EQ(*(*fc)->bias().value.ToVector<float>(), *G("big.bias").ToVector<float>());
  double sum = 0.0;
  for (float v : w) sum += v;
  EXPECT_NEAR(sum, (*G("big.weight_sum").ToVector<double>())[0], 1e-9);
}

TEST_F(GoldenTest, ForwardLossAndGradients) {
  std::unique_ptr<Sequential> model = Model();
  absl::StatusOr<Tensor> logits = model->Forward(G("batch0.x"));
  ASSERT_TRUE(logits.ok()) << logits.status();
  ExpectClose(*logits, G("step0.logits"), "logits");
  absl::StatusOr<CrossEntropyResult> ce = CrossEntropy(*logits, G("batch0.y"));
  ASSERT_TRUE(ce.ok()) << ce.status();
  const float expected_loss = (*G("step0.loss").ToVector<float>())[0];
  EXPECT_NEAR(ce->loss, expected_loss, 1e-5 * std::fabs(expected_loss));
  ASSERT_TRUE(model->Backward(ce->grad_logits, /*input_grad=*/false).ok());
  for (const NamedParameter& p : model->NamedParameters()) {
    ExpectClose(p.parameter->grad, G("step0.grad." + p.name), "grad of " + p.name);
  }
}

struct OptimizerCase {
  std::string key;
  std::function<absl::StatusOr<std::unique_ptr<Optimizer>>(std::vector<NamedParameter>)> make;
};

std::vector<OptimizerCase> Cases() {
  auto sgd = [](SgdOptions o) {
    return [o](std::vector<NamedParameter> p) -> absl::StatusOr<std::unique_ptr<Optimizer>> {
      absl::StatusOr<std::unique_ptr<Sgd>> s = Sgd::Create(std::move(p), o);
      if (!s.ok()) return s.status();
      return std::unique_ptr<Optimizer>(*std::move(s));
    };
  };
  auto adam = [](AdamOptions o) {
    return [o](std::vector<NamedParameter> p) -> absl::StatusOr<std::unique_ptr<Optimizer>> {
      absl::StatusOr<std::unique_ptr<Adam>> s = Adam::Create(std::move(p), o);
      if (!s.ok()) return s.status();
      return std::unique_ptr<Optimizer>(*std::move(s));
    };
  };
  SgdOptions plain;
  plain.lr = 0.1, plain.momentum = 0.9, plain.dampening = 0.1, plain.weight_decay = 1e-3;
  SgdOptions nesterov;
  nesterov.lr = 0.05, nesterov.momentum = 0.8, nesterov.nesterov = true, nesterov.weight_decay = 1e-3;
  AdamOptions amsgrad;
  amsgrad.lr = 1e-2, amsgrad.weight_decay = 1e-3, amsgrad.amsgrad = true;
  AdamOptions adamw = AdamWOptions();
  adamw.lr = 1e-2;
  return {{"sgd", sgd(plain)},
          {"sgd_nesterov", sgd(nesterov)},
          {"adam_amsgrad", adam(amsgrad)},
          {"adamw", adam(adamw)}};
}

TEST_F(GoldenTest, ConfigurationsMatchTheScript) {
  // The C++ cases above mirror OPTIMIZERS in make_nn_golden.py.
  EXPECT_EQ((*metadata_)["optimizers"],
            R"({"adam_amsgrad": ["Adam", {"amsgrad": true, "lr": 0.01, "weight_decay": 0.001}], )"
            R"("adamw": ["AdamW", {"lr": 0.01, "weight_decay": 0.01}], )"
            R"("sgd": ["SGD", {"dampening": 0.1, "lr": 0.1, "momentum": 0.9, "weight_decay": 0.001}], )"
            R"("sgd_nesterov": ["SGD", {"lr": 0.05, "momentum": 0.8, "nesterov": true, "weight_decay": 0.001}]})");
}

TEST_F(GoldenTest, ThreeStepsOfEachOptimizer) {
  for (const OptimizerCase& c : Cases()) {
    SCOPED_TRACE(c.key);
    std::unique_ptr<Sequential> model = Model();
    absl::StatusOr<std::unique_ptr<Optimizer>> opt = c.make(model->NamedParameters());
    ASSERT_TRUE(opt.ok()) << opt.status();
    for (int k = 0; k < 3; ++k) {
      ASSERT_TRUE((*opt)->ZeroGrad().ok());
      absl::StatusOr<Tensor> logits = model->Forward(G("batch" + std::to_string(k) + ".x"));
      ASSERT_TRUE(logits.ok()) << logits.status();
      absl::StatusOr<CrossEntropyResult> ce = CrossEntropy(*logits, G("batch" + std::to_string(k) + ".y"));
      ASSERT_TRUE(ce.ok()) << ce.status();
      const std::string prefix = c.key + ".step" + std::to_string(k) + ".";
      const float expected_loss = (*G(prefix + "loss").ToVector<float>())[0];
      EXPECT_NEAR(ce->loss, expected_loss, 1e-5 * std::fabs(expected_loss)) << prefix;
      ASSERT_TRUE(model->Backward(ce->grad_logits, false).ok());
      ASSERT_TRUE((*opt)->Step().ok());
      for (const NamedParameter& p : model->NamedParameters()) {
        ExpectClose(p.parameter->value, G(prefix + p.name), prefix + p.name);
      }
    }
  }
}

// The CNN of the script: Conv2d 1->4 (3x3, pad 1), ReLU, MaxPool2d(3, 2, 1),
// Conv2d 4->6 (3x3, stride 2, pad 1), ReLU, Flatten, Linear 24->5.
std::unique_ptr<Sequential> Cnn() {
  Mt19937 gen(2);  // torch.manual_seed(2)
  auto model = std::make_unique<Sequential>();
  Conv2dOptions c1;
  c1.in_channels = 1, c1.out_channels = 4, c1.kernel_h = c1.kernel_w = 3, c1.pad_h = c1.pad_w = 1;
  model->Add(*Conv2d::Create(c1, gen));
  model->Add(std::make_unique<ReLU>());
  model->Add(std::make_unique<MaxPool2d>(3, 2, 1));
  Conv2dOptions c2;
  c2.in_channels = 4, c2.out_channels = 6, c2.kernel_h = c2.kernel_w = 3;
  c2.stride_h = c2.stride_w = 2, c2.pad_h = c2.pad_w = 1;
  model->Add(*Conv2d::Create(c2, gen));
  model->Add(std::make_unique<ReLU>());
  model->Add(std::make_unique<Flatten>());
  LinearOptions fc;
  fc.in_features = 24, fc.out_features = 5;
  model->Add(*Linear::Create(fc, gen));
  return model;
}

TEST_F(GoldenTest, ConvNetInitForwardBackwardAndSgd) {
  std::unique_ptr<Sequential> model = Cnn();
  std::vector<std::string> names;
  for (const NamedParameter& p : model->NamedParameters()) {
    names.push_back(p.name);
    EXPECT_EQ(*p.parameter->value.ToVector<float>(), *G("conv.init." + p.name).ToVector<float>())
        << p.name << " (initialization must be bit-identical)";
  }
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "3.weight", "3.bias", "6.weight", "6.bias"}));
  SgdOptions o;
  o.lr = 0.1, o.momentum = 0.9;
  std::unique_ptr<Sgd> sgd = *Sgd::Create(model->NamedParameters(), o);
  for (int k = 0; k < 2; ++k) {
    ASSERT_TRUE(sgd->ZeroGrad().ok());
    absl::StatusOr<Tensor> logits = model->Forward(G("conv.x"));
    ASSERT_TRUE(logits.ok()) << logits.status();
    absl::StatusOr<CrossEntropyResult> ce = CrossEntropy(*logits, G("conv.y"));
    ASSERT_TRUE(ce.ok()) << ce.status();
    absl::StatusOr<Tensor> gx = model->Backward(ce->grad_logits);  // the input gradient too
    ASSERT_TRUE(gx.ok()) << gx.status();
    EXPECT_EQ(gx->shape(), (Shape{3, 1, 8, 8}));
    if (k == 0) {
      ExpectClose(*logits, G("conv.logits"), "conv logits");
      const float expected_loss = (*G("conv.loss").ToVector<float>())[0];
      EXPECT_NEAR(ce->loss, expected_loss, 1e-5 * std::fabs(expected_loss));
      for (const NamedParameter& p : model->NamedParameters()) {
        ExpectClose(p.parameter->grad, G("conv.grad." + p.name), "conv grad of " + p.name);
      }
    }
    ASSERT_TRUE(sgd->Step().ok());
    for (const NamedParameter& p : model->NamedParameters()) {
      ExpectClose(p.parameter->value, G("conv.sgd.step" + std::to_string(k) + "." + p.name),
                  "conv step " + std::to_string(k) + " " + p.name);
    }
  }
}

}  // namespace
}  // namespace lockstep
