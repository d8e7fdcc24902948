// The MLP and CNN of nn/testdata/make_nn_golden.py against PyTorch 1.13:
// initial weights bit for bit; logits, loss, every gradient and the
// parameters after each optimizer step within the radius that
// nn/testing/error_bound.h derives from what may legitimately differ
// between two correct f32 implementations (summation order, fused
// multiply-adds, the last ulps of exp and log), for ours and PyTorch's alike.
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mt19937.h"
#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/checkpoint/safetensors.h"
#include "nn/conv2d.h"
#include "nn/cross_entropy.h"
#include "nn/flatten.h"
#include "nn/linear.h"
#include "nn/max_pool2d.h"
#include "nn/mlp.h"
#include "nn/relu.h"
#include "nn/sgd.h"
#include "nn/testing/error_bound.h"

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

  static bool HasG(const std::string& name) { return golden_->count(name) > 0; }
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

namespace eb = error_bound;

// Ours and PyTorch's both within the derived radius of the f64 reference.
void ExpectBothWithin(const Tensor& ours, const Tensor& pytorch, const eb::Matrix& want, const std::string& what) {
  absl::Status s = eb::ExpectWithin(ours, want, "lockstep's " + what);
  EXPECT_TRUE(s.ok()) << s;
  s = eb::ExpectWithin(pytorch, want, "PyTorch's " + what);
  EXPECT_TRUE(s.ok()) << s;
}

void ExpectBothWithin(double ours, const Tensor& pytorch, const eb::Bounded& want, const std::string& what) {
  absl::Status s = eb::ExpectWithin(ours, want, "lockstep's " + what);
  EXPECT_TRUE(s.ok()) << s;
  s = eb::ExpectWithin(pytorch.data<float>()[0], want, "PyTorch's " + what);
  EXPECT_TRUE(s.ok()) << s;
}

// The reference forward and backward of the MLP (parameters in the order
// 1.weight, 1.bias, 3.weight, ...) at the given parameter values.
eb::MlpReference MlpReference(const std::vector<Tensor>& params, const Tensor& x, const Tensor& y) {
  std::vector<eb::Matrix> weights, biases;
  for (size_t i = 0; i < params.size(); i += 2) {
    weights.push_back(eb::FromTensor(params[i]));
    biases.push_back(eb::FromTensor(params[i + 1]));
  }
  return eb::MlpForwardBackward(eb::FromTensor(x), weights, biases, eb::Labels(y));
}

const eb::Matrix& GradOf(const eb::MlpReference& ref, size_t param_index) {
  return param_index % 2 == 0 ? ref.weight_grads[param_index / 2] : ref.bias_grads[param_index / 2];
}

TEST_F(GoldenTest, InitialWeightsAreBitIdentical) {
  std::unique_ptr<Sequential> model = Model();
  std::vector<NamedParameter> params = model->NamedParameters();
  ASSERT_EQ(params.size(), 6u);
  const std::vector<std::string> names = {"1.weight", "1.bias", "3.weight", "3.bias", "5.weight", "5.bias"};
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].name, names[i]);
    EXPECT_EQ(*params[i].parameter->value.ToVector<float>(), *G("init." + names[i]).ToVector<float>()) << names[i];
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
  std::vector<Tensor> init;
  for (const NamedParameter& p : model->NamedParameters()) init.push_back(G("init." + p.name));
  const eb::MlpReference ref = MlpReference(init, G("batch0.x"), G("batch0.y"));
  absl::StatusOr<Tensor> logits = model->Forward(G("batch0.x"));
  ASSERT_TRUE(logits.ok()) << logits.status();
  ExpectBothWithin(*logits, G("step0.logits"), ref.logits, "logits");
  absl::StatusOr<CrossEntropyResult> ce = CrossEntropy(*logits, G("batch0.y"));
  ASSERT_TRUE(ce.ok()) << ce.status();
  ExpectBothWithin(ce->loss, G("step0.loss"), ref.loss, "loss");
  ASSERT_TRUE(model->Backward(ce->grad_logits, /*input_grad=*/false).ok());
  const std::vector<NamedParameter> params = model->NamedParameters();
  for (size_t i = 0; i < params.size(); ++i) {
    ExpectBothWithin(params[i].parameter->grad, G("step0.grad." + params[i].name), GradOf(ref, i),
                     "grad of " + params[i].name);
  }
}

// The reference's optimizer state of one parameter, as PyTorch names it.
struct ReferenceState {
  eb::Matrix momentum_buffer;
  eb::AdamState adam;
};

struct OptimizerCase {
  std::string key;
  std::function<absl::StatusOr<std::unique_ptr<Optimizer>>(std::vector<NamedParameter>)> make;
  // The same update on the reference, at (1-based) step `step`.
  std::function<eb::Matrix(int64_t step, const eb::Matrix& param, const eb::Matrix& grad, ReferenceState& state)>
      reference;
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
  auto sgd_ref = [](SgdOptions o) {
    eb::SgdConfig c;
    c.lr = o.lr, c.momentum = o.momentum, c.dampening = o.dampening, c.weight_decay = o.weight_decay;
    c.nesterov = o.nesterov;
    return [c](int64_t, const eb::Matrix& p, const eb::Matrix& g, ReferenceState& s) {
      return eb::SgdStep(c, p, g, s.momentum_buffer);
    };
  };
  auto adam_ref = [](AdamOptions o, bool decoupled) {
    eb::AdamConfig c;
    c.lr = o.lr, c.beta1 = o.beta1, c.beta2 = o.beta2, c.eps = o.eps, c.weight_decay = o.weight_decay;
    c.amsgrad = o.amsgrad, c.decoupled = decoupled;
    return [c](int64_t step, const eb::Matrix& p, const eb::Matrix& g, ReferenceState& s) {
      return eb::AdamStep(c, step, p, g, s.adam);
    };
  };
  return {{"sgd", sgd(plain), sgd_ref(plain)},
          {"sgd_nesterov", sgd(nesterov), sgd_ref(nesterov)},
          {"adam_amsgrad", adam(amsgrad), adam_ref(amsgrad, false)},
          {"adamw", adam(adamw), adam_ref(adamw, true)}};
}

TEST_F(GoldenTest, ConfigurationsMatchTheScript) {
  // The C++ cases above mirror OPTIMIZERS in make_nn_golden.py.
  EXPECT_EQ((*metadata_)["optimizers"],
            R"({"adam_amsgrad": ["Adam", {"amsgrad": true, "lr": 0.01, "weight_decay": 0.001}], )"
            R"("adamw": ["AdamW", {"lr": 0.01, "weight_decay": 0.01}], )"
            R"("sgd": ["SGD", {"dampening": 0.1, "lr": 0.1, "momentum": 0.9, "weight_decay": 0.001}], )"
            R"("sgd_nesterov": ["SGD", {"lr": 0.05, "momentum": 0.8, "nesterov": true, "weight_decay": 0.001}]})");
}

// Each step starts from PyTorch's own parameters and optimizer state after
// the step before (so a rounding difference of one step cannot grow into
// the next), then checks our loss, gradients and update, and PyTorch's,
// against the reference started from the same values.
TEST_F(GoldenTest, ThreeStepsOfEachOptimizer) {
  for (const OptimizerCase& c : Cases()) {
    SCOPED_TRACE(c.key);
    std::unique_ptr<Sequential> model = Model();
    const std::vector<NamedParameter> params = model->NamedParameters();
    absl::StatusOr<std::unique_ptr<Optimizer>> opt = c.make(params);
    ASSERT_TRUE(opt.ok()) << opt.status();
    for (int k = 0; k < 3; ++k) {
      const std::string prefix = c.key + ".step" + std::to_string(k) + ".";
      const std::string before = k == 0 ? "init." : c.key + ".step" + std::to_string(k - 1) + ".";
      std::vector<NamedTensor> values, state;
      std::vector<Tensor> start;
      std::vector<ReferenceState> ref_state(params.size());
      for (size_t i = 0; i < params.size(); ++i) {
        values.push_back({params[i].name, G(before + params[i].name)});
        start.push_back(G(before + params[i].name));
        if (k == 0) continue;
        for (const char* key : {"momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"}) {
          const std::string name = before + "state." + params[i].name + "." + key;
          if (!HasG(name)) continue;
          state.push_back({"state." + std::to_string(i) + "." + key, G(name)});
          const eb::Matrix m = eb::FromTensor(G(name));
          if (std::string(key) == "momentum_buffer") ref_state[i].momentum_buffer = m;
          if (std::string(key) == "exp_avg") ref_state[i].adam.exp_avg = m;
          if (std::string(key) == "exp_avg_sq") ref_state[i].adam.exp_avg_sq = m;
          if (std::string(key) == "max_exp_avg_sq") ref_state[i].adam.max_exp_avg_sq = m;
        }
      }
      ASSERT_TRUE(model->LoadStateDict(values).ok());
      if (k > 0) {
        ASSERT_TRUE((*opt)->LoadStateTensors(state).ok()) << (*opt)->LoadStateTensors(state);
      }
      const Tensor& x = G("batch" + std::to_string(k) + ".x");
      const Tensor& y = G("batch" + std::to_string(k) + ".y");
      const eb::MlpReference ref = MlpReference(start, x, y);
      ASSERT_TRUE((*opt)->ZeroGrad().ok());
      absl::StatusOr<Tensor> logits = model->Forward(x);
      ASSERT_TRUE(logits.ok()) << logits.status();
      absl::StatusOr<CrossEntropyResult> ce = CrossEntropy(*logits, y);
      ASSERT_TRUE(ce.ok()) << ce.status();
      ExpectBothWithin(ce->loss, G(prefix + "loss"), ref.loss, prefix + "loss");
      ASSERT_TRUE(model->Backward(ce->grad_logits, false).ok());
      for (size_t i = 0; i < params.size(); ++i) {
        ExpectBothWithin(params[i].parameter->grad, G(prefix + "grad." + params[i].name), GradOf(ref, i),
                         prefix + "grad." + params[i].name);
      }
      ASSERT_TRUE((*opt)->Step().ok());
      for (size_t i = 0; i < params.size(); ++i) {
        const eb::Matrix want = c.reference(k + 1, eb::FromTensor(start[i]), GradOf(ref, i), ref_state[i]);
        ExpectBothWithin(params[i].parameter->value, G(prefix + params[i].name), want, prefix + params[i].name);
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

// The CNN's reference forward and backward at the given parameters
// (0.weight, 0.bias, 3.weight, 3.bias, 6.weight, 6.bias).
struct CnnReference {
  eb::Matrix logits;
  eb::Bounded loss;
  std::vector<eb::Matrix> grads;
};

CnnReference CnnForwardBackward(const std::vector<Tensor>& p, const Tensor& x, const Tensor& y) {
  const eb::ConvShape c1{3, 1, 8, 8, 4, 3, 1, 1};
  const eb::PoolShape pool{3, 4, 8, 8, 3, 2, 1};
  const eb::ConvShape c2{3, 4, 4, 4, 6, 3, 2, 1};
  const eb::Matrix in = eb::FromTensor(x);
  const eb::Matrix w1 = eb::FromTensor(p[0]), b1 = eb::FromTensor(p[1]);
  const eb::Matrix w2 = eb::FromTensor(p[2]), b2 = eb::FromTensor(p[3]);
  const eb::Matrix w3 = eb::FromTensor(p[4]), b3 = eb::FromTensor(p[5]);
  const eb::Matrix z1 = eb::ConvForward(c1, in, w1, b1);
  const eb::Matrix a1 = eb::ReluForward(z1);
  const eb::Matrix m1 = eb::MaxPoolForward(pool, a1);
  const eb::Matrix z2 = eb::ConvForward(c2, m1, w2, b2);
  const eb::Matrix a2 = eb::ReluForward(z2);  // [3, 24]: Flatten is a view
  CnnReference out;
  out.logits = eb::LinearForward(a2, w3, b3);
  eb::CrossEntropyBounds ce = eb::CrossEntropy(out.logits, eb::Labels(y));
  out.loss = ce.loss;
  eb::LinearGrads g3 = eb::LinearBackward(a2, w3, ce.grad, true);
  eb::LinearGrads g2 = eb::ConvBackward(c2, m1, w2, eb::ReluBackward(z2, g3.dx), true);
  const eb::Matrix dz1 = eb::ReluBackward(z1, eb::MaxPoolBackward(pool, a1, g2.dx));
  eb::LinearGrads g1 = eb::ConvBackward(c1, in, w1, dz1, false);
  out.grads = {g1.dw, g1.db, g2.dw, g2.db, g3.dw, g3.db};
  return out;
}

// Step 0 from the initial parameters; step 1 from PyTorch's parameters and
// momentum buffer after step 0 (the buffer of a first step is the gradient).
TEST_F(GoldenTest, ConvNetInitForwardBackwardAndSgd) {
  std::unique_ptr<Sequential> model = Cnn();
  std::vector<std::string> names;
  for (const NamedParameter& p : model->NamedParameters()) {
    names.push_back(p.name);
    EXPECT_EQ(*p.parameter->value.ToVector<float>(), *G("conv.init." + p.name).ToVector<float>())
        << p.name << " (initialization must be bit-identical)";
  }
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "3.weight", "3.bias", "6.weight", "6.bias"}));
  const std::vector<NamedParameter> params = model->NamedParameters();
  SgdOptions o;
  o.lr = 0.1, o.momentum = 0.9;
  eb::SgdConfig ref_sgd;
  ref_sgd.lr = o.lr, ref_sgd.momentum = o.momentum;
  std::unique_ptr<Sgd> sgd = *Sgd::Create(params, o);
  for (int k = 0; k < 2; ++k) {
    const std::string before = k == 0 ? "conv.init." : "conv.sgd.step0.";
    const std::string grads = k == 0 ? "conv.grad." : "conv.sgd.step1.grad.";
    std::vector<NamedTensor> values, state;
    std::vector<Tensor> start;
    std::vector<eb::Matrix> bufs(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      values.push_back({names[i], G(before + names[i])});
      start.push_back(G(before + names[i]));
      if (k == 1) {
        state.push_back({"state." + std::to_string(i) + ".momentum_buffer", G("conv.grad." + names[i])});
        bufs[i] = eb::FromTensor(G("conv.grad." + names[i]));
      }
    }
    ASSERT_TRUE(model->LoadStateDict(values).ok());
    if (k == 1) {
      ASSERT_TRUE(sgd->LoadStateTensors(state).ok());
    }
    const CnnReference ref = CnnForwardBackward(start, G("conv.x"), G("conv.y"));
    ASSERT_TRUE(sgd->ZeroGrad().ok());
    absl::StatusOr<Tensor> logits = model->Forward(G("conv.x"));
    ASSERT_TRUE(logits.ok()) << logits.status();
    absl::StatusOr<CrossEntropyResult> ce = CrossEntropy(*logits, G("conv.y"));
    ASSERT_TRUE(ce.ok()) << ce.status();
    absl::StatusOr<Tensor> gx = model->Backward(ce->grad_logits);  // the input gradient too
    ASSERT_TRUE(gx.ok()) << gx.status();
    EXPECT_EQ(gx->shape(), (Shape{3, 1, 8, 8}));
    if (k == 0) {
      ExpectBothWithin(*logits, G("conv.logits"), ref.logits, "conv logits");
      ExpectBothWithin(ce->loss, G("conv.loss"), ref.loss, "conv loss");
    }
    for (size_t i = 0; i < params.size(); ++i) {
      ExpectBothWithin(params[i].parameter->grad, G(grads + names[i]), ref.grads[i], grads + names[i]);
    }
    ASSERT_TRUE(sgd->Step().ok());
    for (size_t i = 0; i < params.size(); ++i) {
      const eb::Matrix want = eb::SgdStep(ref_sgd, eb::FromTensor(start[i]), ref.grads[i], bufs[i]);
      ExpectBothWithin(params[i].parameter->value, G("conv.sgd.step" + std::to_string(k) + "." + names[i]), want,
                       "conv step " + std::to_string(k) + " " + names[i]);
    }
  }
}

}  // namespace
}  // namespace lockstep
