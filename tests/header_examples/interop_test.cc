// The usage examples of interop/torch's public headers (libtorch models),
// compiled and run on two ranks (threads, collectives/testing/group.h).
// Each example's lines appear below exactly as in its header (checked by
// //tests:header_examples_check); lines in between set up its inputs or
// check its results. Needs libtorch-dev (skipped without it).
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <vector>

#include "collectives/testing/group.h"
#include "core/status.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "interop/torch/distributed_data_parallel.h"
#include "interop/torch/tensor_bridge.h"

namespace lockstep {
namespace {

// interop/torch/tensor_bridge.h
absl::Status TensorBridgeExample() {
  at::Tensor w = torch::randn({4, 3});
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor view, FromTorch(w));  // w's memory, as lockstep's
  LOCKSTEP_ASSIGN_OR_RETURN(at::Tensor back, ToTorch(view));  // and as libtorch's again
  if (view.raw_data() != w.data_ptr() || back.data_ptr() != w.data_ptr() || !torch::equal(back, w)) {
    return absl::InternalError("the bridge copied instead of sharing");
  }
  return absl::OkStatus();
}

TEST(InteropHeaderExamplesTest, TensorBridgeSharesMemoryBothWays) {
  const absl::Status s = TensorBridgeExample();
  EXPECT_TRUE(s.ok()) << s;
}

struct Net : torch::nn::Module {
  torch::nn::Linear fc{register_module("fc", torch::nn::Linear(6, 3))};
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
};

// 8 examples of 6 features, labels 0..2; each rank its own.
struct Examples : torch::data::datasets::Dataset<Examples> {
  explicit Examples(int rank) : x(torch::arange(48, torch::kFloat).reshape({8, 6}).mul(0.1 * (rank + 1)).sin()) {}
  torch::data::Example<> get(size_t i) override {
    return {x[static_cast<int64_t>(i)], torch::tensor(static_cast<int64_t>(i % 3))};
  }
  torch::optional<size_t> size() const override { return 8; }
  torch::Tensor x;
};

// interop/torch/distributed_data_parallel.h; the final fc.weight goes to
// `trained`.
absl::Status DdpExample(Communicator* comm, std::vector<float>* trained) {
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      Examples(comm->rank()).map(torch::data::transforms::Stack<>()), 4);
  auto model = std::make_shared<Net>();                  // your module
  LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, interop::DistributedDataParallel<Net>::Create(model, *comm));
  torch::optim::SGD optimizer(model->parameters(), /*lr=*/0.1);
  for (auto& batch : *loader) {
    LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor out, ddp->Forward(batch.data));
    torch::Tensor loss = torch::nn::functional::cross_entropy(out, batch.target);
    loss.backward();                                     // gradients averaged across ranks
    optimizer.step();
    optimizer.zero_grad();
  }
  at::Tensor w = model->fc->weight.detach().contiguous();
  trained->assign(w.data_ptr<float>(), w.data_ptr<float>() + w.numel());
  return absl::OkStatus();
}

TEST(InteropHeaderExamplesTest, DdpTrainsTheSameModelOnEveryRank) {
  at::set_num_threads(1);
  std::vector<float> trained[2];
  const std::vector<absl::Status> results =
      testing::RunThreads(2, [&](Communicator& comm) { return DdpExample(&comm, &trained[comm.rank()]); });
  for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(trained[0].size(), 18u);
  EXPECT_EQ(trained[0], trained[1]);  // Different data, one model.
}

}  // namespace
}  // namespace lockstep
