// The usage examples of interop/torch's public headers (libtorch models),
// compiled and run on two ranks (threads, collectives/testing/group.h).
// Each example's lines appear below exactly as in its header (checked by
// //tests:header_examples_check); lines in between set up its inputs or
// check its results. Needs libtorch-dev (skipped without it).
#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/testing/group.h"
#include "core/status.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "interop/torch/ddp/distributed_data_parallel.h"
#include "interop/torch/fsdp/fully_shard.h"
#include "interop/torch/fsdp/sharded_unit.h"
#include "interop/torch/models/char_transformer.h"
#include "interop/torch/models/resnet18.h"
#include "interop/torch/c10d/process_group_lockstep.h"
#include "interop/torch/bridge/tensor_bridge.h"
#include "interop/torch/c10d/torch_store.h"
#include "interop/torch/bridge/torch_module.h"
#include "interop/torch/c10d/torch_work.h"
#include "interop/torch/trainers/torch_ddp_stepper.h"
#include "interop/torch/trainers/torch_fsdp_stepper.h"
#include "fsdp/sharded_optimizer.h"
#include "nn/adam.h"
#include "data/synthetic_dataset.h"
#include "nn/cross_entropy.h"
#include "nn/sgd.h"
#include "trainers/train_loop.h"

namespace lockstep {
namespace {

// interop/torch/models/resnet18.h
TEST(InteropExamplesTest, ResNet18ClassifiesFashionMnistShapes) {
  using interop::ResNet18;
  using interop::ResNet18Options;
  ResNet18Options options;                      // 1 channel, 10 classes
  ResNet18 model(options);
  torch::Tensor logits = model->forward(torch::zeros({8, 1, 28, 28}));  // [8, 10]
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{8, 10}));
}

// interop/torch/models/char_transformer.h
TEST(InteropExamplesTest, CharTransformerPredictsEveryPosition) {
  using interop::CharTransformer;
  using interop::CharTransformerLoss;
  using interop::CharTransformerOptions;
  CharTransformerOptions options;
  options.vocab_size = 114;             // a CharCorpus's vocabulary().size()
  torch::manual_seed(0);                // its initialization, whatever ran before in this process
  CharTransformer model(options);
  torch::Tensor logits = model->forward(torch::zeros({4, 128}, torch::kLong));  // [4, 128, vocab]
  torch::Tensor loss = CharTransformerLoss(logits, torch::zeros({4, 128}, torch::kLong));
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{4, 128, 114}));
  // Untrained, near-uniform: about log(114).
  EXPECT_NEAR(loss.item<double>(), std::log(114.0), 1.0);
}

// interop/torch/bridge/tensor_bridge.h
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

// interop/torch/ddp/distributed_data_parallel.h; the final fc.weight goes to
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

// interop/torch/fsdp/sharded_unit.h: units marked where a model is built,
// in a Sequential and in a ModuleList.
TEST(InteropHeaderExamplesTest, ShardedKeepsTheNamesOfThePlainModel) {
  using interop::BasicBlock;
  using interop::CharTransformerBlock;
  using interop::Sharded;
  torch::nn::Sequential layer;
  torch::nn::ModuleList blocks;
  layer->push_back(Sharded(BasicBlock(64, 64, 1)));        // in a Sequential
  blocks->push_back(Sharded(CharTransformerBlock(384, 6)));  // or a ModuleList
  EXPECT_TRUE(layer->named_parameters().contains("0.conv1.weight"));
  EXPECT_TRUE(blocks->named_parameters().contains("0.qkv.weight"));
  EXPECT_EQ(layer->forward(torch::zeros({1, 64, 4, 4})).sizes(), (std::vector<int64_t>{1, 64, 4, 4}));
}

// interop/torch/fsdp/fully_shard.h: two units (Sharded) and the root's own
// linear head; the head's trained weight goes to `trained`.
struct FsdpNetImpl : torch::nn::Module {
  torch::nn::Sequential body{register_module(
      "body", torch::nn::Sequential(interop::Sharded(torch::nn::Linear(6, 16)), torch::nn::Functional(torch::relu),
                                    interop::Sharded(torch::nn::Linear(16, 16))))};
  torch::nn::Linear fc{register_module("fc", torch::nn::Linear(16, 3))};
  torch::Tensor forward(torch::Tensor x) { return fc(torch::relu(body->forward(x))); }
};
using NetImpl = FsdpNetImpl;

absl::Status FsdpExample(Communicator* comm, std::vector<float>* trained) {
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      Examples(comm->rank()).map(torch::data::transforms::Stack<>()), 4);
  torch::manual_seed(comm->rank());  // Different on purpose: Create broadcasts rank 0's.
  auto model = std::make_shared<NetImpl>();    // its blocks built as Sharded(Block(...))
  LOCKSTEP_ASSIGN_OR_RETURN(auto fsdp, interop::FullyShard<NetImpl>::Create(model, *comm));
  torch::optim::SGD optimizer(fsdp->shard_parameters(), /*lr=*/0.1);
  for (auto& batch : *loader) {
    LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor out, fsdp->Forward(batch.data));
    torch::Tensor loss = torch::nn::functional::cross_entropy(out, batch.target);
    loss.backward();                         // shard gradients averaged across ranks
    optimizer.step();                        // steps this rank's shards
    optimizer.zero_grad();
  }
  if (fsdp->unit_paths() != std::vector<std::string>{"", "body.0", "body.2"}) {
    return absl::InternalError("unexpected units");
  }
  LOCKSTEP_ASSIGN_OR_RETURN(auto state, fsdp->FullStateDict());
  for (const auto& [name, t] : state) {
    if (name == "fc.weight") trained->assign(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
  }
  return absl::OkStatus();
}

TEST(InteropHeaderExamplesTest, FsdpTrainsTheSameModelOnEveryRank) {
  at::set_num_threads(1);
  std::vector<float> trained[2];
  testing::ExpectAllOk(
      testing::RunThreads(2, [&](Communicator& comm) { return FsdpExample(&comm, &trained[comm.rank()]); }));
  ASSERT_EQ(trained[0].size(), 48u);
  EXPECT_EQ(trained[0], trained[1]);  // Different data and seeds, one model.
}

// interop/torch/bridge/torch_module.h: ResNet-18 trained by lockstep's SGD.
absl::Status TorchModuleExample(bool* changed) {
  using interop::ResNet18;
  using interop::ResNet18Options;
  using interop::TorchModule;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor images, FromTorch(torch::randn({4, 1, 28, 28})));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor labels, Tensor::FromVector<int64_t>({0, 3, 7, 9}));
  SgdOptions sgd_options;
  sgd_options.lr = 0.1;
  ResNet18 net(ResNet18Options{});
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TorchModule> model, TorchModule::Create(net));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> sgd, Sgd::Create(model->NamedParameters(), sgd_options));
  const at::Tensor before = net->named_parameters()["fc.weight"].detach().clone();
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, model->Forward(images));   // libtorch's forward
  LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, labels));
  LOCKSTEP_RETURN_IF_ERROR(model->Backward(ce.grad_logits, /*input_grad=*/false).status());
  LOCKSTEP_RETURN_IF_ERROR(sgd->Step());                              // updates net's parameters
  *changed = !torch::equal(before, net->named_parameters()["fc.weight"]);
  return absl::OkStatus();
}

TEST(InteropHeaderExamplesTest, TorchModuleTrainsALibtorchModel) {
  bool changed = false;
  const absl::Status s = TorchModuleExample(&changed);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(changed);
}

// interop/torch/trainers/torch_ddp_stepper.h: the shared training loop on a
// libtorch model, two ranks.
struct TinyNetImpl : torch::nn::Module {
  TinyNetImpl() : fc(register_module("fc", torch::nn::Linear(16, 10))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc(x.flatten(1)); }
  torch::nn::Linear fc;
};
TORCH_MODULE(TinyNet);

absl::Status TorchDdpStepperExample(Communicator& comm, std::vector<float>* trained) {
  using interop::TorchDdpStepper;
  using interop::TorchModule;
  SyntheticOptions data;
  data.size = 64;
  data.example_shape = {1, 4, 4};
  LOCKSTEP_ASSIGN_OR_RETURN(std::shared_ptr<SyntheticDataset> train, SyntheticDataset::Create(data));
  TinyNet net;  // rank 0's initial values reach the other rank
  TrainLoopOptions options;
  options.batch_size = 8;
  options.rank = comm.rank();
  options.world_size = comm.size();
  options.progress = ProgressMode::kNone;
  TrainParts parts;
  parts.train = train;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TorchModule> model, TorchModule::Create(net));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TorchDdpStepper> stepper,
                            TorchDdpStepper::Create(*model, comm, DdpOptions{}));  // the group's
  SgdOptions sgd_options;
  sgd_options.lr = 0.1;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> sgd, Sgd::Create(model->NamedParameters(), sgd_options));
  parts.optimizer = sgd.get();
  parts.stepper = stepper.get();
  parts.comm = &comm;
  LOCKSTEP_ASSIGN_OR_RETURN(TrainResult result, RunTraining(options, parts));
  if (result.steps != 4) return absl::InternalError(absl::StrCat(result.steps, " steps, expected 64 / 2 / 8 = 4"));
  at::Tensor w = net->fc->weight.detach().contiguous();
  trained->assign(w.data_ptr<float>(), w.data_ptr<float>() + w.numel());
  return absl::OkStatus();
}

TEST(InteropHeaderExamplesTest, TorchDdpStepperTrainsOneModelOnEveryRank) {
  at::set_num_threads(1);
  std::vector<float> trained[2];
  const std::vector<absl::Status> results = testing::RunThreads(
      2, [&](Communicator& comm) { return TorchDdpStepperExample(comm, &trained[comm.rank()]); });
  for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(trained[0].size(), 160u);
  EXPECT_EQ(trained[0], trained[1]);
}

// interop/torch/trainers/torch_fsdp_stepper.h: the same loop, fully sharded:
// the first layer a unit of its own, Adam over each rank's shards.
struct TinyShardedNetImpl : torch::nn::Module {
  TinyShardedNetImpl()
      : fc1(register_module("fc1", interop::Sharded(torch::nn::Linear(16, 12)))),
        fc2(register_module("fc2", torch::nn::Linear(12, 10))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(fc1(x.flatten(1)))); }
  interop::ShardedHolder<torch::nn::LinearImpl> fc1;
  torch::nn::Linear fc2;
};
TORCH_MODULE(TinyShardedNet);

absl::StatusOr<std::unique_ptr<Optimizer>> MakeAdam(std::vector<NamedParameter> params) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Adam> adam, Adam::Create(std::move(params), AdamOptions()));
  return std::unique_ptr<Optimizer>(std::move(adam));
}

absl::Status TorchFsdpStepperExample(Communicator& comm, std::vector<float>* trained) {
  using interop::TorchFsdpStepper;
  using interop::TorchModule;
  SyntheticOptions data;
  data.size = 64;
  data.example_shape = {1, 4, 4};
  LOCKSTEP_ASSIGN_OR_RETURN(std::shared_ptr<SyntheticDataset> train, SyntheticDataset::Create(data));
  TinyShardedNet net;
  TrainLoopOptions options;
  options.batch_size = 8;
  options.rank = comm.rank();
  options.world_size = comm.size();
  options.progress = ProgressMode::kNone;
  TrainParts parts;
  parts.train = train;
  parts.comm = &comm;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TorchModule> model, TorchModule::Create(net));  // Sharded blocks
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TorchFsdpStepper> stepper, TorchFsdpStepper::Create(*model, comm));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<ShardedOptimizer> optimizer, ShardedOptimizer::Create(
      *stepper, [](std::vector<NamedParameter> shards) { return MakeAdam(std::move(shards)); }));
  parts.stepper = stepper.get();
  parts.optimizer = optimizer.get();
  LOCKSTEP_ASSIGN_OR_RETURN(TrainResult result, RunTraining(options, parts));
  if (result.steps != 4) return absl::InternalError(absl::StrCat(result.steps, " steps, expected 64 / 2 / 8 = 4"));
  LOCKSTEP_ASSIGN_OR_RETURN(auto state, stepper->fsdp().FullStateDict());
  at::Tensor w = state.front().second.contiguous();  // fc1.weight, whole
  trained->assign(w.data_ptr<float>(), w.data_ptr<float>() + w.numel());
  return absl::OkStatus();
}

TEST(InteropHeaderExamplesTest, TorchFsdpStepperTrainsOneModelOverTwoRanks) {
  at::set_num_threads(1);
  std::vector<float> trained[2];
  const std::vector<absl::Status> results = testing::RunThreads(
      2, [&](Communicator& comm) { return TorchFsdpStepperExample(comm, &trained[comm.rank()]); });
  for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(trained[0].size(), 192u);
  EXPECT_EQ(trained[0], trained[1]);
}

// interop/torch/c10d/torch_store.h: a c10d HashStore seen as lockstep's Store.
absl::Status TorchStoreExample(std::string* got) {
  c10::intrusive_ptr<c10d::Store> theirs = c10::make_intrusive<c10d::HashStore>();  // the backend creator's argument
  theirs->set("key", std::vector<uint8_t>{'v', '1'});
  auto store = std::make_shared<TorchStore>(theirs);
  LOCKSTEP_ASSIGN_OR_RETURN(std::string v, store->Get("key", std::chrono::seconds(30)));
  *got = v;
  return absl::OkStatus();
}

TEST(InteropHeaderExamplesTest, TorchStoreReadsTheC10dStore) {
  std::string got;
  const absl::Status s = TorchStoreExample(&got);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(got, "v1");
}

// interop/torch/c10d/torch_work.h: a lockstep all-reduce as a c10d::Work; the
// result is in `sum`, the future's value in `future_value`.
absl::Status TorchWorkExample(Communicator* comm, float* sum, float* future_value) {
  const int rank = comm->rank();
  at::Tensor tensor = torch::full({3}, static_cast<float>(rank + 1));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor view, FromTorch(tensor));
  std::shared_ptr<Work> mine = comm->AllReduce(view, ReduceOp::kSum);
  c10::intrusive_ptr<c10d::Work> theirs =
      TorchWork::Create(rank, c10d::OpType::ALLREDUCE, mine, {{tensor}}, /*finish=*/nullptr);
  theirs->wait();  // throws the lockstep error as a RuntimeError
  *sum = tensor[2].item<float>();
  *future_value = theirs->getFuture()->value().toTensorVector().at(0)[0].item<float>();
  return absl::OkStatus();
}

TEST(InteropHeaderExamplesTest, TorchWorkCompletesWithTheResult) {
  float sum[2] = {0, 0}, future_value[2] = {0, 0};
  const std::vector<absl::Status> results = testing::RunThreads(
      2, [&](Communicator& comm) { return TorchWorkExample(&comm, &sum[comm.rank()], &future_value[comm.rank()]); });
  for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(sum[r], 3.0f);  // 1 + 2
    EXPECT_EQ(future_value[r], 3.0f);
  }
}

// interop/torch/c10d/process_group_lockstep.h: two ranks (threads) meet through
// one c10d store and all-reduce; rank r's result goes to `out[r]`.
void ProcessGroupExample(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, float* out) {
  std::vector<at::Tensor> tensors = {torch::full({4}, static_cast<float>(rank + 1))};
  c10::intrusive_ptr<TorchBackendBase> pg =  // c10d::ProcessGroup (1.13) or c10d::Backend (2.x)
      ProcessGroupLockstep::Create(store, rank, size, std::chrono::minutes(30));
  pg->allreduce(tensors)->wait();
  *out = tensors[0][3].item<float>();
}

TEST(InteropHeaderExamplesTest, ProcessGroupAllReducesOverItsOwnGroup) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  float out[2] = {0, 0};
  std::string errors[2];
  std::thread ranks[2];
  for (int r = 0; r < 2; ++r) {
    ranks[r] = std::thread([&, r] {
      try {
        ProcessGroupExample(store, r, 2, &out[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(out[r], 3.0f) << "rank " << r;
  }
}

}  // namespace
}  // namespace lockstep
