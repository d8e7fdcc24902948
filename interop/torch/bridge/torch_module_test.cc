#include "interop/torch/bridge/torch_module.h"

#include <torch/torch.h>

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "interop/torch/bridge/tensor_bridge.h"
#include "nn/cross_entropy.h"
#include "nn/sgd.h"

namespace lockstep {
namespace interop {
namespace {

// Linear-BatchNorm-ReLU-Linear: parameters and buffers (running stats and
// the i64 num_batches_tracked).
struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(6, 5))),
        bn(register_module("bn", torch::nn::BatchNorm1d(5))),
        fc2(register_module("fc2", torch::nn::Linear(5, 3))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(bn(fc1(x)))); }
  torch::nn::Linear fc1;
  torch::nn::BatchNorm1d bn;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Net);

// Two nets with the same initial values.
std::pair<Net, Net> Twins() {
  torch::manual_seed(7);
  Net a;
  torch::manual_seed(7);
  Net b;
  return {a, b};
}

bool BitEqual(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

TEST(TorchModuleTest, NamesAreTorchStateDictNames) {
  auto [net, unused] = Twins();
  absl::StatusOr<std::unique_ptr<TorchModule>> m = TorchModule::Create(net);
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<std::string> names, torch_names;
  for (const NamedTensor& t : (*m)->StateDict()) names.push_back(t.first);
  for (const auto& p : net->named_parameters()) torch_names.push_back(p.key());
  for (const auto& b : net->named_buffers()) torch_names.push_back(b.key());
  EXPECT_EQ(names, torch_names);
  EXPECT_EQ((*m)->NumParameterElements(), 6 * 5 + 5 + 5 + 5 + 5 * 3 + 3);
}

// Forward and backward are libtorch's own: the same values and gradients,
// bit for bit, as the twin trained by torch alone; the lockstep optimizer
// writes the libtorch parameters in place.
TEST(TorchModuleTest, TrainsTheLibtorchModuleInPlace) {
  auto [net, twin] = Twins();
  absl::StatusOr<std::unique_ptr<TorchModule>> made = TorchModule::Create(net);
  ASSERT_TRUE(made.ok()) << made.status();
  TorchModule& m = **made;
  SgdOptions options;
  options.lr = 0.5;
  absl::StatusOr<std::unique_ptr<Sgd>> sgd = Sgd::Create(m.NamedParameters(), options);
  ASSERT_TRUE(sgd.ok()) << sgd.status();
  torch::manual_seed(1);
  const at::Tensor x = torch::randn({8, 6});
  const at::Tensor labels = torch::randint(0, 3, {8}, torch::kLong);
  for (int step = 0; step < 3; ++step) {
    absl::StatusOr<Tensor> in = FromTorch(x);
    ASSERT_TRUE(in.ok()) << in.status();
    absl::StatusOr<Tensor> logits = m.Forward(*in);
    ASSERT_TRUE(logits.ok()) << logits.status();
    absl::StatusOr<Tensor> lab = FromTorch(labels);
    absl::StatusOr<CrossEntropyResult> ce = CrossEntropy(*logits, *lab);
    ASSERT_TRUE(ce.ok()) << ce.status();
    ASSERT_TRUE(m.Backward(ce->grad_logits, /*input_grad=*/false).ok());

    at::Tensor out = twin->forward(x);
    ASSERT_TRUE(BitEqual(*ToTorch(*logits), out.detach())) << "step " << step;
    out.backward(ToTorch(ce->grad_logits)->clone());
    for (size_t i = 0; i < twin->parameters().size(); ++i) {
      ASSERT_TRUE(BitEqual(net->parameters()[i].grad(), twin->parameters()[i].grad())) << "step " << step << " " << i;
    }
    std::vector<at::Tensor> before;
    for (const at::Tensor& p : net->parameters()) before.push_back(p.detach().clone());
    ASSERT_TRUE((*sgd)->Step().ok());
    ASSERT_TRUE((*sgd)->ZeroGrad().ok());
    {
      torch::NoGradGuard no_grad;
      const std::vector<at::Tensor> twin_params = twin->parameters();
      for (size_t i = 0; i < twin_params.size(); ++i) {
        at::Tensor p = twin_params[i];
        // What the step must have written into net's tensor.
        const at::Tensor expected = before[i] - 0.5f * p.grad();
        EXPECT_LE((net->parameters()[i] - expected).abs().max().item<float>(),
                  (expected.abs().max().item<float>() + 1) * 1e-6f);
        p.copy_(net->parameters()[i]);  // Keep the twins equal.
        p.grad().zero_();
        EXPECT_EQ(net->parameters()[i].grad().abs().max().item<float>(), 0.0f);  // zeroed in place
      }
    }
  }
  // The running statistics moved in both, the same way.
  EXPECT_TRUE(BitEqual(net->bn->running_mean, twin->bn->running_mean));
  EXPECT_EQ(net->bn->num_batches_tracked.item<int64_t>(), 3);
}

TEST(TorchModuleTest, EvalRecordsNoGraph) {
  auto [net, unused] = Twins();
  std::unique_ptr<TorchModule> m = *TorchModule::Create(net);
  m->Eval();
  Tensor in = *FromTorch(torch::randn({4, 6}));
  absl::StatusOr<Tensor> out = m->Forward(in);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FALSE(net->is_training());
  EXPECT_EQ(net->bn->num_batches_tracked.item<int64_t>(), 0);  // eval: statistics untouched
  Tensor grad = *Tensor::Zeros({4, 3}, DType::kF32);
  EXPECT_EQ(m->Backward(grad, false).status().code(), absl::StatusCode::kFailedPrecondition);
  m->Train();
  ASSERT_TRUE(m->Forward(in).ok());
  EXPECT_TRUE(net->is_training());
}

TEST(TorchModuleTest, LoadStateDictWritesTheLibtorchTensors) {
  auto [net, other] = Twins();
  torch::manual_seed(99);
  Net fresh;
  std::unique_ptr<TorchModule> m = *TorchModule::Create(net);
  std::unique_ptr<TorchModule> f = *TorchModule::Create(fresh);
  std::vector<NamedTensor> state;
  for (const NamedTensor& t : f->StateDict()) state.emplace_back(t.first, t.second.Clone().value());
  ASSERT_TRUE(m->LoadStateDict(state).ok());
  for (size_t i = 0; i < fresh->parameters().size(); ++i) {
    EXPECT_TRUE(BitEqual(net->parameters()[i].detach(), fresh->parameters()[i].detach())) << i;
  }
}

TEST(TorchModuleTest, ErrorsComeBackAsStatus) {
  auto [net, unused] = Twins();
  std::unique_ptr<TorchModule> m = *TorchModule::Create(net);
  absl::StatusOr<Tensor> out = m->Forward(*FromTorch(torch::randn({4, 7})));  // 7 features, not 6
  ASSERT_EQ(out.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(out.status().message().find("forward raised"), std::string::npos) << out.status();
  EXPECT_EQ(m->CloneTo(Device::Cpu()).status().code(), absl::StatusCode::kUnimplemented);
  ASSERT_TRUE(m->Forward(*FromTorch(torch::randn({4, 6}))).ok());
  EXPECT_EQ(m->Backward(*Tensor::Zeros({4, 2}, DType::kF32), false).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace interop
}  // namespace lockstep
