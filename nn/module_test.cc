// Module behaviour on the MLP: names, gradient-ready hooks, accumulation,
// state dicts, deep copies and misuse errors.
#include "nn/module.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/mt19937.h"
#include "gtest/gtest.h"
#include "nn/cross_entropy.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "nn/relu.h"

namespace lockstep {
namespace {

std::unique_ptr<Sequential> Mlp(uint64_t seed = 0, double dropout = 0.0) {
  Mt19937 gen(seed);
  MlpOptions options;
  options.sizes = {6, 5, 4, 3};
  options.dropout = dropout;
  return *MakeMlp(options, gen);
}

Tensor Batch(int rows, int cols, float base) {
  std::vector<float> v(rows * cols);
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + 0.37f * std::sin(static_cast<float>(i));
  return *Tensor::FromVector<float>(v, {rows, cols});
}

// By value: a range-for over `*t.ToVector<float>()` would read a destroyed
// temporary.
std::vector<float> Values(const Tensor& t) { return *t.ToVector<float>(); }

Tensor Labels(std::vector<int64_t> y) { return *Tensor::FromVector<int64_t>(y); }

// One forward + loss + backward; returns the loss gradient used.
void Step(Sequential& model, const Tensor& x, const Tensor& y) {
  absl::StatusOr<Tensor> logits = model.Forward(x);
  ASSERT_TRUE(logits.ok()) << logits.status();
  absl::StatusOr<CrossEntropyResult> ce = CrossEntropy(*logits, y);
  ASSERT_TRUE(ce.ok()) << ce.status();
  ASSERT_TRUE(model.Backward(ce->grad_logits).ok());
}

TEST(ModuleTest, NamesFollowPyTorch) {
  std::unique_ptr<Sequential> model = Mlp();
  std::vector<std::string> names;
  for (const NamedParameter& p : model->NamedParameters()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"1.weight", "1.bias", "3.weight", "3.bias", "5.weight", "5.bias"}));
  std::vector<std::string> state;
  for (const NamedTensor& t : model->StateDict()) state.push_back(t.first);
  EXPECT_EQ(state, names);
  EXPECT_EQ(model->NumParameterElements(), 6 * 5 + 5 + 5 * 4 + 4 + 4 * 3 + 3);
}

TEST(ModuleTest, SetRequiresGradSelectsByNameAndFrozenParametersGetNoGradient) {
  std::unique_ptr<Sequential> model = Mlp();
  // "1" selects 1.weight and 1.bias; "5.w" is no name and no prefix of one.
  EXPECT_EQ(*model->SetRequiresGrad("1", false), 2);
  EXPECT_EQ(*model->SetRequiresGrad("3.bias", false), 1);
  absl::StatusOr<int64_t> none = model->SetRequiresGrad("5.w", false);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("1.weight, 1.bias, 3.weight"), std::string::npos) << none.status();
  std::vector<std::string> fired;
  model->SetGradReadyHook([&](const GradReadyEvent& e) {
    fired.push_back(e.name);
    return absl::OkStatus();
  });
  Step(*model, Batch(4, 6, 0.1f), Labels({0, 1, 2, 0}));
  EXPECT_EQ(fired, (std::vector<std::string>{"5.bias", "5.weight", "3.weight"}));
  std::vector<NamedParameter> p = model->NamedParameters();
  EXPECT_FALSE(p[0].parameter->grad.defined());
  EXPECT_FALSE(p[1].parameter->grad.defined());
  EXPECT_TRUE(p[2].parameter->grad.defined());
  EXPECT_FALSE(p[3].parameter->grad.defined());
  // The trainable ones' gradients are those of the unfrozen model.
  std::unique_ptr<Sequential> reference = Mlp();
  Step(*reference, Batch(4, 6, 0.1f), Labels({0, 1, 2, 0}));
  std::vector<NamedParameter> q = reference->NamedParameters();
  for (size_t i : {2, 4, 5}) EXPECT_EQ(Values(p[i].parameter->grad), Values(q[i].parameter->grad)) << p[i].name;
  // A deep copy keeps the flags; the state dict keeps frozen parameters.
  std::unique_ptr<Module> copy = *model->CloneTo(Device::Cpu());
  EXPECT_FALSE(copy->NamedParameters()[0].parameter->requires_grad);
  EXPECT_TRUE(copy->NamedParameters()[2].parameter->requires_grad);
  EXPECT_EQ(model->StateDict().size(), 6u);
}

TEST(ModuleTest, NamedModulesListsTheTreeDepthFirst) {
  std::unique_ptr<Sequential> model = Mlp();
  std::vector<std::string> paths;
  for (const auto& [path, m] : model->NamedModules()) paths.push_back(absl::StrCat(path, ":", m->type_name()));
  EXPECT_EQ(paths, (std::vector<std::string>{":Sequential", "0:Flatten", "1:Linear", "2:ReLU", "3:Linear", "4:ReLU",
                                             "5:Linear"}));
}

TEST(ModuleTest, HooksFireOncePerParameterInReverseOrderWithFinalGradients) {
  std::unique_ptr<Sequential> model = Mlp();
  std::vector<std::string> order;
  std::vector<std::vector<float>> at_hook;
  std::vector<NamedParameter> named = model->NamedParameters();
  model->SetGradReadyHook([&](const GradReadyEvent& e) {
    // The event's index and name are the parameter's place in NamedParameters().
    EXPECT_EQ(named[e.index].parameter, &e.parameter);
    EXPECT_EQ(named[e.index].name, e.name);
    order.push_back(e.name);
    at_hook.push_back(*e.parameter.grad.ToVector<float>());
    return absl::OkStatus();
  });
  const Tensor x = Batch(4, 6, 0.1f);
  const Tensor y = Labels({0, 2, 1, 2});
  for (int pass = 0; pass < 2; ++pass) {
    order.clear();
    at_hook.clear();
    Step(*model, x, y);
    EXPECT_EQ(order, (std::vector<std::string>{"5.bias", "5.weight", "3.bias", "3.weight", "1.bias", "1.weight"}));
    // What the hook saw is what backward left: the gradient was final.
    std::vector<NamedParameter> params = model->NamedParameters();
    for (size_t i = 0; i < order.size(); ++i) {
      Parameter* p = nullptr;
      for (const NamedParameter& np : params) {
        if (np.name == order[i]) p = np.parameter;
      }
      EXPECT_EQ(at_hook[i], *p->grad.ToVector<float>()) << order[i];
    }
  }
}

TEST(ModuleTest, HookForLayerKFiresBeforeLayerKMinusOneComputes) {
  // The hook of the last layer's weight runs while the first layer has not
  // produced a gradient yet: DDP can start reducing it during backward.
  std::unique_ptr<Sequential> model = Mlp();
  std::vector<NamedParameter> params = model->NamedParameters();
  Parameter* first_weight = params[0].parameter;
  bool first_had_grad_at_last_hook = true;
  model->SetGradReadyHook([&](const GradReadyEvent& e) {
    if (&e.parameter == params[4].parameter) {
      first_had_grad_at_last_hook = first_weight->grad.defined();
    }
    return absl::OkStatus();
  });
  Step(*model, Batch(3, 6, 0.0f), Labels({1, 1, 0}));
  EXPECT_FALSE(first_had_grad_at_last_hook);
}

TEST(ModuleTest, AHookErrorStopsBackwardAtOnce) {
  std::unique_ptr<Sequential> model = Mlp();
  std::vector<std::string> seen;
  model->SetGradReadyHook([&](const GradReadyEvent& e) {
    seen.push_back(e.name);
    if (e.name == "3.weight") return absl::UnavailableError("peer 2 is gone");
    return absl::OkStatus();
  });
  absl::StatusOr<Tensor> logits = model->Forward(Batch(3, 6, 0.1f));
  absl::StatusOr<CrossEntropyResult> ce = CrossEntropy(*logits, Labels({0, 1, 2}));
  absl::StatusOr<Tensor> gx = model->Backward(ce->grad_logits);
  EXPECT_EQ(gx.status().code(), absl::StatusCode::kUnavailable);  // the hook's code, kept
  EXPECT_NE(gx.status().message().find("gradient-ready hook for '3.weight' (index 2): peer 2 is gone"),
            absl::string_view::npos)
      << gx.status();
  EXPECT_NE(gx.status().message().find("Sequential child 3 (Linear)"), absl::string_view::npos) << gx.status();
  EXPECT_EQ(seen, (std::vector<std::string>{"5.bias", "5.weight", "3.bias", "3.weight"}));
  std::vector<NamedParameter> params = model->NamedParameters();
  EXPECT_TRUE(params[2].parameter->grad.defined());   // 3.weight: accumulated, then the hook failed
  EXPECT_FALSE(params[1].parameter->grad.defined());  // 1.bias: never reached
  // Without the hook, the model trains on.
  model->SetGradReadyHook(nullptr);
  ASSERT_TRUE(model->ZeroGrad(/*set_to_none=*/true).ok());
  Step(*model, Batch(3, 6, 0.1f), Labels({0, 1, 2}));
}

TEST(ModuleTest, ModuleHooksWrapEachChildsForwardAndBackward) {
  std::unique_ptr<Sequential> model = Mlp();  // 0 Flatten, 1 Linear, 2 ReLU, 3 Linear, 4 ReLU, 5 Linear
  std::vector<std::string> events;
  for (size_t i : {size_t{1}, size_t{3}}) {
    Module& child = model->child(i);
    const std::string n = std::to_string(i);
    ModuleHooks hooks;
    hooks.pre_forward = [&events, n] { return events.push_back("pre_forward " + n), absl::OkStatus(); };
    hooks.post_forward = [&events, n] { return events.push_back("post_forward " + n), absl::OkStatus(); };
    hooks.pre_backward = [&events, n, &child] {
      // The child's gradient is not computed yet: the hook can prepare it.
      events.push_back("pre_backward " + n + (child.Parameters()[0]->grad.defined() ? " late" : ""));
      return absl::OkStatus();
    };
    hooks.post_backward = [&events, n, &child] {
      events.push_back("post_backward " + n + (child.Parameters()[0]->grad.defined() ? "" : " early"));
      return absl::OkStatus();
    };
    child.SetModuleHooks(std::move(hooks));
  }
  Step(*model, Batch(3, 6, 0.0f), Labels({1, 1, 0}));
  EXPECT_EQ(events,
            (std::vector<std::string>{"pre_forward 1", "post_forward 1", "pre_forward 3", "post_forward 3",
                                      "pre_backward 3", "post_backward 3", "pre_backward 1", "post_backward 1"}));
  // Called directly, a module runs without its own hooks.
  events.clear();
  ASSERT_TRUE(model->child(1).Forward(Batch(3, 6, 0.0f)).ok());
  EXPECT_TRUE(events.empty());
}

TEST(ModuleTest, AModuleHookErrorStopsThePass) {
  std::unique_ptr<Sequential> model = Mlp();
  int later_forwards = 0;
  ModuleHooks counting;
  counting.pre_forward = [&] { return ++later_forwards, absl::OkStatus(); };
  model->child(5).SetModuleHooks(counting);
  ModuleHooks failing;
  failing.post_forward = [] { return absl::UnavailableError("gather of unit 3 failed"); };
  model->child(3).SetModuleHooks(failing);
  absl::StatusOr<Tensor> out = model->Forward(Batch(3, 6, 0.0f));
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(out.status().message().find("Sequential child 3 (Linear): gather of unit 3 failed"),
            absl::string_view::npos)
      << out.status();
  EXPECT_EQ(later_forwards, 0);
  failing = ModuleHooks();
  failing.pre_backward = [] { return absl::DataLossError("unit 3 shards differ"); };
  model->child(3).SetModuleHooks(failing);
  absl::StatusOr<Tensor> logits = model->Forward(Batch(3, 6, 0.0f));
  ASSERT_TRUE(logits.ok()) << logits.status();
  absl::StatusOr<CrossEntropyResult> ce = CrossEntropy(*logits, Labels({0, 1, 2}));
  absl::StatusOr<Tensor> gx = model->Backward(ce->grad_logits);
  EXPECT_EQ(gx.status().code(), absl::StatusCode::kDataLoss) << gx.status();
  EXPECT_FALSE(model->child(3).Parameters()[0]->grad.defined());  // Stopped before its backward.
}

TEST(ModuleTest, HookNamesAreRelativeToTheModuleItWasSetOn) {
  std::unique_ptr<Sequential> model = Mlp();
  Module& fc3 = model->child(3);
  std::vector<std::pair<size_t, std::string>> seen;
  fc3.SetGradReadyHook([&](const GradReadyEvent& e) {
    seen.emplace_back(e.index, e.name);
    return absl::OkStatus();
  });
  ASSERT_TRUE(fc3.Forward(Batch(2, 5, 0.0f)).ok());
  ASSERT_TRUE(fc3.Backward(*Tensor::Zeros({2, 4}, DType::kF32)).ok());
  EXPECT_EQ(seen, (std::vector<std::pair<size_t, std::string>>{{1, "bias"}, {0, "weight"}}));
  // The root's backward runs the root's hook only (none here).
  seen.clear();
  Step(*model, Batch(2, 6, 0.0f), Labels({0, 1}));
  EXPECT_TRUE(seen.empty());
}

TEST(ModuleTest, HookTableFollowsModulesAddedAfterTheHookWasSet) {
  auto model = std::make_unique<Sequential>();
  Mt19937 gen(0);
  LinearOptions fc;
  fc.in_features = 3, fc.out_features = 2;
  model->Add(*Linear::Create(fc, gen));
  std::vector<std::string> seen;
  model->SetGradReadyHook([&](const GradReadyEvent& e) {
    seen.push_back(absl::StrCat(e.index, ":", e.name));
    return absl::OkStatus();
  });
  fc.in_features = 2;
  ASSERT_TRUE(model->Add("head", *Linear::Create(fc, gen)).ok());
  ASSERT_TRUE(model->Forward(Batch(2, 3, 0.5f)).ok());
  ASSERT_TRUE(model->Backward(*Tensor::Zeros({2, 2}, DType::kF32)).ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"3:head.bias", "2:head.weight", "1:0.bias", "0:0.weight"}));
}

TEST(ModuleTest, GradientsAccumulateUntilZeroGrad) {
  std::unique_ptr<Sequential> model = Mlp();
  const Tensor x = Batch(4, 6, 0.3f);
  const Tensor y = Labels({2, 0, 1, 1});
  Step(*model, x, y);
  std::vector<std::vector<float>> once;
  for (Parameter* p : model->Parameters()) once.push_back(*p->grad.ToVector<float>());
  Step(*model, x, y);
  std::vector<Parameter*> params = model->Parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<float> twice = *params[i]->grad.ToVector<float>();
    for (size_t k = 0; k < twice.size(); ++k) EXPECT_EQ(twice[k], 2.0f * once[i][k]);
  }
  // ZeroGrad fills, so even Inf/NaN left by a skipped step become 0.
  params[0]->grad.data<float>()[0] = NAN;
  ASSERT_TRUE(model->ZeroGrad().ok());
  for (Parameter* p : params) {
    for (float v : Values(p->grad)) EXPECT_EQ(v, 0.0f);
  }
  ASSERT_TRUE(model->ZeroGrad(/*set_to_none=*/true).ok());
  for (Parameter* p : params) EXPECT_FALSE(p->grad.defined());
}

TEST(ModuleTest, NoInputGradientMeansNoneBeforeTheFirstTrainableLayer) {
  // Flatten (child 0) has no parameters: without an input gradient the first
  // Linear must not compute one either, yet every parameter gets its
  // gradient and every pending forward is consumed.
  std::unique_ptr<Sequential> model = Mlp();
  absl::StatusOr<Tensor> logits = model->Forward(Batch(2, 6, 0.0f));
  absl::StatusOr<CrossEntropyResult> ce = CrossEntropy(*logits, Labels({0, 1}));
  absl::StatusOr<Tensor> gx = model->Backward(ce->grad_logits, /*input_grad=*/false);
  ASSERT_TRUE(gx.ok()) << gx.status();
  EXPECT_FALSE(gx->defined());
  for (Parameter* p : model->Parameters()) EXPECT_TRUE(p->grad.defined());
  EXPECT_FALSE(model->Backward(ce->grad_logits).ok());  // consumed
  // With an input gradient, it has the input's shape.
  logits = model->Forward(Batch(2, 6, 0.0f));
  gx = model->Backward(ce->grad_logits);
  ASSERT_TRUE(gx.ok()) << gx.status();
  EXPECT_EQ(gx->shape(), (Shape{2, 6}));
}

TEST(ModuleTest, BackwardWithoutForwardIsAnError) {
  std::unique_ptr<Sequential> model = Mlp();
  absl::StatusOr<Tensor> g = model->Backward(*Tensor::Zeros({2, 3}, DType::kF32));
  EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(g.status().message().find("no pending Forward"), absl::string_view::npos) << g.status();
  // A consumed forward cannot be reused.
  Step(*model, Batch(2, 6, 0.0f), Labels({0, 1}));
  EXPECT_FALSE(model->Backward(*Tensor::Zeros({2, 3}, DType::kF32)).ok());
}

TEST(ModuleTest, ForwardRejectsWrongShapes) {
  std::unique_ptr<Sequential> model = Mlp();
  absl::StatusOr<Tensor> y = model->Forward(Batch(2, 7, 0.0f));
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(y.status().message().find("Linear(6 -> 5)"), absl::string_view::npos) << y.status();
  EXPECT_NE(y.status().message().find("child 1"), absl::string_view::npos) << y.status();
}

TEST(ModuleTest, InputGradientMatchesFiniteDifferences) {
  std::unique_ptr<Sequential> model = Mlp(3);
  const Tensor x = Batch(2, 6, 0.2f);
  const Tensor y = Labels({1, 2});
  absl::StatusOr<Tensor> logits = model->Forward(x);
  absl::StatusOr<CrossEntropyResult> ce = CrossEntropy(*logits, y);
  absl::StatusOr<Tensor> gx = model->Backward(ce->grad_logits);
  ASSERT_TRUE(gx.ok()) << gx.status();
  std::vector<float> analytic = *gx->ToVector<float>();
  auto loss_at = [&](const std::vector<float>& v) {
    Tensor t = *Tensor::FromVector<float>(v, {2, 6});
    Tensor l = *model->Forward(t);
    return CrossEntropy(l, y)->loss;
  };
  std::vector<float> base = *x.ToVector<float>();
  for (size_t i = 0; i < base.size(); ++i) {
    std::vector<float> plus = base, minus = base;
    plus[i] += 1e-2f;
    minus[i] -= 1e-2f;
    const double numeric = (loss_at(plus) - loss_at(minus)) / (plus[i] - minus[i]);
    EXPECT_NEAR(analytic[i], numeric, 2e-3) << i;
  }
}

TEST(ModuleTest, StateDictRoundTripAndStrictErrors) {
  std::unique_ptr<Sequential> a = Mlp(1), b = Mlp(2);
  std::vector<NamedTensor> state = a->StateDict();
  ASSERT_TRUE(b->LoadStateDict(state).ok());
  for (size_t i = 0; i < state.size(); ++i) {
    EXPECT_EQ(*b->StateDict()[i].second.ToVector<float>(), *state[i].second.ToVector<float>());
    EXPECT_FALSE(b->StateDict()[i].second.SharesStorageWith(state[i].second));  // copied
  }
  std::unique_ptr<Sequential> c = Mlp(3);
  const std::vector<float> before = *c->StateDict()[0].second.ToVector<float>();
  std::vector<NamedTensor> bad = state;
  bad.erase(bad.begin() + 1);                                      // missing 1.bias
  bad.emplace_back("9.weight", *Tensor::Zeros({1}, DType::kF32));  // unexpected
  bad[2].second = *Tensor::Zeros({7, 7}, DType::kF32);             // 3.bias (after the erase) mis-shaped
  absl::Status s = c->LoadStateDict(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("missing: 1.bias"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("unexpected: 9.weight"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("'3.bias': expected f32[4], got f32[7, 7]"), absl::string_view::npos) << s;
  EXPECT_EQ(*c->StateDict()[0].second.ToVector<float>(), before);  // nothing written
  // Non-strict loading ignores missing and unexpected names, not bad shapes.
  bad[2].second = state[3].second;
  EXPECT_TRUE(c->LoadStateDict(bad, /*strict=*/false).ok());
}

// A module with a buffer (like BatchNorm's running statistics).
class Scaled : public Module {
 public:
  Scaled() {
    scale_.value = *Tensor::FromVector<float>({2.0f});
    count_ = *Tensor::FromVector<int64_t>({7});
    RegisterParameter("scale", &scale_);
    RegisterBuffer("count", &count_);
  }
  absl::string_view type_name() const override { return "Scaled"; }
  absl::StatusOr<Tensor> Forward(const Tensor& input) override { return input; }

 protected:
  absl::StatusOr<Tensor> BackwardImpl(const Tensor& g, bool, const ParameterReadyFn&) override { return g; }
  absl::StatusOr<std::unique_ptr<Module>> NewLike(Device) const override {
    return std::unique_ptr<Module>(new Scaled());
  }

 private:
  Parameter scale_;
  Tensor count_;
};

TEST(ModuleTest, BuffersFollowParametersOfTheirModuleInTheStateDict) {
  auto model = std::make_unique<Sequential>();
  model->Add(std::make_unique<Scaled>());
  Mt19937 gen(0);
  LinearOptions fc;
  fc.in_features = 2, fc.out_features = 1;
  model->Add(*Linear::Create(fc, gen));
  model->Add(std::make_unique<Scaled>());
  std::vector<std::string> names;
  for (const NamedTensor& t : model->StateDict()) names.push_back(t.first);
  EXPECT_EQ(names, (std::vector<std::string>{"0.scale", "0.count", "1.weight", "1.bias", "2.scale", "2.count"}));
  ASSERT_EQ(model->NamedBuffers().size(), 2u);
  EXPECT_EQ(model->NamedBuffers()[1].first, "2.count");
  std::vector<NamedTensor> state = model->StateDict();
  state[1].second = *Tensor::FromVector<int64_t>({42});
  ASSERT_TRUE(model->LoadStateDict(state).ok());
  EXPECT_EQ((*model->NamedBuffers()[0].second.ToVector<int64_t>())[0], 42);
  EXPECT_EQ(model->Parameters().size(), 4u);  // buffers are not parameters
}

TEST(ModuleTest, CloneToIsADeepCopy) {
  std::unique_ptr<Sequential> model = Mlp(4);
  absl::StatusOr<std::unique_ptr<Module>> copy = model->CloneTo(Device::Cpu());
  ASSERT_TRUE(copy.ok()) << copy.status();
  const Tensor x = Batch(3, 6, -0.2f);
  std::vector<float> a = *model->Forward(x)->ToVector<float>();
  std::vector<float> b = *(*copy)->Forward(x)->ToVector<float>();
  EXPECT_EQ(a, b);
  (*copy)->Parameters()[0]->value.data<float>()[0] += 1.0f;
  EXPECT_NE((*copy)->Parameters()[0]->value.data<float>()[0], model->Parameters()[0]->value.data<float>()[0]);
}

TEST(ModuleTest, DropoutTrainAndEval) {
  std::unique_ptr<Sequential> model = Mlp(5, /*dropout=*/0.5);
  EXPECT_EQ(model->size(), 8u);  // Flatten, (Linear, ReLU, Dropout) x 2, Linear
  const Tensor x = Batch(4, 6, 0.5f);
  std::vector<float> train1 = *model->Forward(x)->ToVector<float>();
  std::vector<float> train2 = *model->Forward(x)->ToVector<float>();
  EXPECT_NE(train1, train2);  // a new mask per call
  model->Eval();
  std::vector<float> eval1 = *model->Forward(x)->ToVector<float>();
  std::vector<float> eval2 = *model->Forward(x)->ToVector<float>();
  EXPECT_EQ(eval1, eval2);
  // Backward reapplies the forward's mask: zeroed activations get no gradient.
  model->Train();
  Dropout drop(0.5, 9);
  Tensor ones = *Tensor::FromVector<float>(std::vector<float>(64, 1.0f), {8, 8});
  std::vector<float> out = *drop.Forward(ones)->ToVector<float>();
  std::vector<float> grad = *drop.Backward(ones)->ToVector<float>();
  EXPECT_EQ(out, grad);
  Dropout all(1.0, 1);
  for (float v : Values(*all.Forward(ones))) EXPECT_EQ(v, 0.0f);
  Dropout invalid(1.5, 1);
  EXPECT_EQ(invalid.Forward(ones).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lockstep
