// lockstep's FSDP for libtorch modules against lockstep's libtorch DDP on
// the same model, data and torch::optim optimizer, 2 ranks (threads): the
// parameters of ResNet-18 and of the character Transformer are
// bit-identical at every step, with and without NoSync accumulation; the
// units are freed between steps (their storage holds no bytes); the full
// state dict has the plain model's names and loads at another world size;
// bf16 mixed precision trains the same model within bf16's rounding.
#include "interop/torch/fsdp/fully_shard.h"

#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <array>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/testing/group.h"
#include "core/deadline.h"
#include "core/subprocess.h"
#include "gtest/gtest.h"
#include "interop/torch/bridge/tensor_bridge.h"
#include "interop/torch/ddp/distributed_data_parallel.h"
#include "interop/torch/models/char_transformer.h"
#include "interop/torch/models/resnet18.h"
#include "nn/checkpoint/safetensors.h"

namespace lockstep {
namespace interop {
namespace {

enum class Model { kResNet, kTransformer };

// Small widths: the same code paths as the full models, in test time.
ResNet18Options ResNetOptions(bool shard) {
  ResNet18Options o;
  o.width = 8;
  o.shard_blocks = shard;
  return o;
}
CharTransformerOptions TransformerOptions(bool shard) {
  CharTransformerOptions o;
  o.vocab_size = 20;
  o.context = 16;
  o.layers = 3;
  o.dim = 32;
  o.heads = 4;
  o.shard_blocks = shard;
  return o;
}

// Built under one lock: torch's generator is global.
template <typename Impl, typename Options>
std::shared_ptr<Impl> Build(const Options& options) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(42);
  return std::make_shared<Impl>(options);
}

torch::Tensor Images(int rank, int step, int micro) {
  return torch::arange(4 * 28 * 28, torch::kFloat)
      .reshape({4, 1, 28, 28})
      .mul(0.013 * (rank + 1) + 0.001 * micro)
      .add(0.7 * step)
      .sin();
}
torch::Tensor Labels(int rank, int step) { return torch::tensor({1, 3, (rank + step) % 10, 7}, torch::kLong); }
torch::Tensor Ids(int rank, int step, int micro) {
  return torch::arange(2 * 16, torch::kLong).reshape({2, 16}).mul(3 + rank + micro).add(step).remainder(20);
}

using Params = std::map<std::string, std::vector<float>>;

std::vector<float> Flat(const at::Tensor& t) {
  at::Tensor c = t.to(torch::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

struct RunSetup {
  Model model = Model::kResNet;
  bool fsdp = true;
  bool adam = false;
  int steps = 3;
  int micro = 1;
  TorchFullyShardOptions options;
};

// Runs `s` on one rank; per step, every parameter by name.
template <typename Impl, typename Opts, typename Loss>
absl::Status TrainModel(Communicator& comm, const RunSetup& s, const Opts& model_options, const Loss& loss_of,
                        std::vector<Params>* out, std::vector<int>* gathered_between_steps) {
  auto model = Build<Impl>(model_options);
  std::unique_ptr<FullyShard<Impl>> fsdp;
  std::unique_ptr<DistributedDataParallel<Impl>> ddp;
  std::vector<at::Tensor> params;
  if (s.fsdp) {
    LOCKSTEP_ASSIGN_OR_RETURN(fsdp, FullyShard<Impl>::Create(model, comm, s.options));
    params = fsdp->shard_parameters();
    // ResNet-18: 8 blocks and the root; the Transformer: 3 blocks and the root.
    const size_t units = s.model == Model::kResNet ? 9 : 4;
    if (fsdp->unit_paths().size() != units || params.size() != units) {
      return absl::InternalError(absl::StrCat(fsdp->unit_paths().size(), " units, expected ", units));
    }
  } else {
    LOCKSTEP_ASSIGN_OR_RETURN(ddp, DistributedDataParallel<Impl>::Create(model, comm));
    params = model->parameters();
  }
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (s.adam) {
    opt = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(0.01));
  } else {
    opt = std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.05).momentum(0.9));
  }
  for (int step = 0; step < s.steps; ++step) {
    for (int m = 0; m < s.micro; ++m) {
      const bool last = m + 1 == s.micro;
      try {
        if (s.fsdp) {
          std::unique_ptr<typename FullyShard<Impl>::NoSyncScope> scope;
          if (!last) scope = std::make_unique<typename FullyShard<Impl>::NoSyncScope>(fsdp->NoSync());
          LOCKSTEP_ASSIGN_OR_RETURN(
              torch::Tensor y, loss_of(comm.rank(), step, m, [&](const torch::Tensor& x) { return fsdp->Forward(x); }));
          y.backward();
        } else {
          std::unique_ptr<typename DistributedDataParallel<Impl>::NoSyncScope> scope;
          if (!last) scope = std::make_unique<typename DistributedDataParallel<Impl>::NoSyncScope>(ddp->NoSync());
          LOCKSTEP_ASSIGN_OR_RETURN(
              torch::Tensor y, loss_of(comm.rank(), step, m, [&](const torch::Tensor& x) { return ddp->Forward(x); }));
          y.backward();
        }
      } catch (const std::exception& e) {
        return absl::InternalError(absl::StrCat("rank ", comm.rank(), " step ", step, ": ", e.what()));
      }
    }
    opt->step();
    opt->zero_grad();
    Params p;
    if (s.fsdp) {
      if (gathered_between_steps != nullptr) {
        gathered_between_steps->push_back(fsdp->gathered_units());
        // Freed, not just forgotten: every parameter's storage holds no bytes.
        for (const at::Tensor& t : model->parameters()) {
          if (t.storage().nbytes() != 0) return absl::InternalError("a unit's storage outlived backward");
        }
      }
      LOCKSTEP_ASSIGN_OR_RETURN(auto state, fsdp->FullStateDict());
      std::map<std::string, bool> is_param;
      for (const auto& item : model->named_parameters()) is_param[item.key()] = true;
      for (const auto& [name, t] : state) {
        if (is_param.count(name)) p[name] = Flat(t);
      }
    } else {
      for (const auto& item : model->named_parameters()) p[item.key()] = Flat(item.value());
    }
    out->push_back(std::move(p));
  }
  return absl::OkStatus();
}

absl::Status Train(Communicator& comm, const RunSetup& s, std::vector<Params>* out,
                   std::vector<int>* gathered = nullptr) {
  using Forward = std::function<absl::StatusOr<torch::Tensor>(const torch::Tensor&)>;
  if (s.model == Model::kResNet) {
    return TrainModel<ResNet18Impl>(
        comm, s, ResNetOptions(s.fsdp),
        [](int rank, int step, int m, const Forward& forward) -> absl::StatusOr<torch::Tensor> {
          LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor logits, forward(Images(rank, step, m)));
          return torch::nn::functional::cross_entropy(logits, Labels(rank, step));
        },
        out, gathered);
  }
  return TrainModel<CharTransformerImpl>(
      comm, s, TransformerOptions(s.fsdp),
      [](int rank, int step, int m, const Forward& forward) -> absl::StatusOr<torch::Tensor> {
        LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor logits, forward(Ids(rank, step, m)));
        return CharTransformerLoss(logits, Ids(rank, step + 1, m));
      },
      out, gathered);
}

class TorchFsdpTest : public ::testing::Test {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

void ExpectBitIdentical(RunSetup s) {
  std::array<std::vector<Params>, 2> fsdp, ddp;
  std::array<std::vector<int>, 2> gathered;
  s.fsdp = true;
  testing::ExpectAllOk(testing::RunThreads(
      2, [&](Communicator& comm) { return Train(comm, s, &fsdp[comm.rank()], &gathered[comm.rank()]); }));
  s.fsdp = false;
  testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) { return Train(comm, s, &ddp[comm.rank()]); }));
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(fsdp[r].size(), static_cast<size_t>(s.steps));
    ASSERT_EQ(ddp[r].size(), static_cast<size_t>(s.steps));
    for (int step = 0; step < s.steps; ++step) {
      ASSERT_EQ(fsdp[r][step].size(), ddp[r][step].size());
      for (const auto& [name, want] : ddp[r][step]) {
        const std::vector<float>& got = fsdp[r][step].at(name);
        ASSERT_EQ(got.size(), want.size()) << name;
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)))
            << "rank " << r << " step " << step << " " << name;
      }
    }
    for (int g : gathered[r]) EXPECT_EQ(g, 0) << "rank " << r << ": units still gathered between steps";
  }
  EXPECT_NE(fsdp[0].front(), fsdp[0].back());  // It trained.
}

TEST_F(TorchFsdpTest, ResNet18IsBitIdenticalToDdpAtWorldTwo) { ExpectBitIdentical({Model::kResNet}); }
TEST_F(TorchFsdpTest, TransformerWithAdamIsBitIdenticalToDdpAtWorldTwo) {
  ExpectBitIdentical({Model::kTransformer, true, /*adam=*/true});
}
TEST_F(TorchFsdpTest, NoSyncAccumulationIsBitIdenticalToDdpsAtWorldTwo) {
  ExpectBitIdentical({Model::kTransformer, true, false, /*steps=*/2, /*micro=*/2});
}
TEST_F(TorchFsdpTest, WithoutPrefetchOrReshardingTheSame) {
  RunSetup s{Model::kResNet};
  s.steps = 2;
  s.options.prefetch = false;
  s.options.reshard_after_forward = false;
  ExpectBitIdentical(s);
}

TEST_F(TorchFsdpTest, TheFullStateDictHasThePlainNamesAndLoadsAtAnotherWorldSize) {
  auto plain = Build<ResNet18Impl>(ResNetOptions(false));
  std::array<std::vector<std::pair<std::string, at::Tensor>>, 2> at2;
  std::array<std::vector<std::pair<std::string, at::Tensor>>, 3> at3;
  testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) -> absl::Status {
    std::vector<Params> unused;
    auto model = Build<ResNet18Impl>(ResNetOptions(true));
    LOCKSTEP_ASSIGN_OR_RETURN(auto fsdp, FullyShard<ResNet18Impl>::Create(model, comm));
    torch::optim::SGD sgd(fsdp->shard_parameters(), 0.1);
    LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor logits, fsdp->Forward(Images(comm.rank(), 0, 0)));
    torch::nn::functional::cross_entropy(logits, Labels(comm.rank(), 0)).backward();
    sgd.step();
    LOCKSTEP_ASSIGN_OR_RETURN(at2[comm.rank()], fsdp->FullStateDict());
    return absl::OkStatus();
  }));
  testing::ExpectAllOk(testing::RunThreads(3, [&](Communicator& comm) -> absl::Status {
    auto model = Build<ResNet18Impl>(ResNetOptions(true));
    LOCKSTEP_ASSIGN_OR_RETURN(auto fsdp, FullyShard<ResNet18Impl>::Create(model, comm));
    LOCKSTEP_RETURN_IF_ERROR(fsdp->LoadFullStateDict(at2[0]));
    LOCKSTEP_ASSIGN_OR_RETURN(at3[comm.rank()], fsdp->FullStateDict());
    // A bad state is refused whole.
    auto bad = at2[0];
    bad.erase(bad.begin());
    bad.back().second = torch::zeros({3});
    absl::Status s = fsdp->LoadFullStateDict(bad);
    if (s.ok() || s.message().find("missing 'conv1.weight'") == absl::string_view::npos ||
        s.message().find("nothing was loaded") == absl::string_view::npos) {
      return absl::InternalError("expected the problems listed, got " + s.ToString());
    }
    return absl::OkStatus();
  }));
  std::vector<std::string> names;
  for (const auto& item : plain->named_parameters()) names.push_back(item.key());
  for (const auto& item : plain->named_buffers()) names.push_back(item.key());
  ASSERT_EQ(at2[0].size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(at2[0][i].first, names[i]);
  EXPECT_FALSE(at2[0][0].second.equal(plain->named_parameters()[names[0]]));  // It trained.
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(at3[r].size(), at2[0].size());
    for (size_t i = 0; i < at2[0].size(); ++i) {
      EXPECT_EQ(at3[r][i].first, at2[0][i].first);
      if (at3[r][i].first.find("num_batches_tracked") != std::string::npos) continue;
      EXPECT_EQ(Flat(at3[r][i].second), Flat(at2[0][i].second)) << "rank " << r << " " << at2[0][i].first;
    }
  }
}

// The full state dict of an FSDP-trained ResNet-18, written as safetensors,
// loads in a Python PyTorch program with load_state_dict(strict=True) into
// the Python twin (interop/torch/ddp/testdata/load_checkpoint.py), which then computes what
// the plain C++ model loaded with the same state computes, bit for bit.
TEST_F(TorchFsdpTest, TheFullStateLoadsInPythonPyTorchStrictly) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::string ckpt = dir + "/fsdp_full.safetensors", out = dir + "/python_logits.safetensors";
  std::vector<std::pair<std::string, at::Tensor>> state;
  testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) -> absl::Status {
    auto model = Build<ResNet18Impl>(ResNetOptions(true));
    LOCKSTEP_ASSIGN_OR_RETURN(auto fsdp, FullyShard<ResNet18Impl>::Create(model, comm));
    torch::optim::SGD sgd(fsdp->shard_parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int step = 0; step < 2; ++step) {
      LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor logits, fsdp->Forward(Images(comm.rank(), step, 0)));
      torch::nn::functional::cross_entropy(logits, Labels(comm.rank(), step)).backward();
      sgd.step();
      sgd.zero_grad();
    }
    LOCKSTEP_ASSIGN_OR_RETURN(auto full, fsdp->FullStateDict());
    if (comm.rank() == 0) state = std::move(full);
    return absl::OkStatus();
  }));
  ASSERT_FALSE(state.empty());
  const at::Tensor probe = Images(1, 9, 0);
  std::vector<std::pair<std::string, Tensor>> file;
  for (const auto& [name, t] : state) file.emplace_back(name, *FromTorch(t));
  file.emplace_back("probe.x", *FromTorch(probe));
  ASSERT_TRUE(WriteSafetensorsFile(ckpt, file, {}).ok());
  // The plain C++ model with the same state.
  auto plain = Build<ResNet18Impl>(ResNetOptions(false));
  {
    torch::NoGradGuard no_grad;
    auto params = plain->named_parameters(), buffers = plain->named_buffers();
    for (const auto& [name, t] : state) (params.contains(name) ? params[name] : buffers[name]).copy_(t);
  }
  plain->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor logits = plain->forward(probe).contiguous();
  SubprocessOptions options;
  options.argv = {"/usr/bin/python3",
                  absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"),
                               "/interop/torch/ddp/testdata/load_checkpoint.py"),
                  ckpt, "resnet18:8", out};
  options.env = {{"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}};
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
  ASSERT_TRUE(child.ok()) << child.status();
  absl::StatusOr<ExitStatus> status = child->Wait(DeadlineIn(std::chrono::seconds(120)));
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_TRUE(status->success()) << "load_checkpoint.py " << status->ToString();
  absl::StatusOr<SafetensorsFile> python = ReadSafetensorsFile(out);
  ASSERT_TRUE(python.ok()) << python.status();
  ASSERT_EQ(python->tensors.size(), 1u);
  const Tensor& theirs = python->tensors[0].second;
  ASSERT_EQ(theirs.nbytes(), static_cast<size_t>(logits.numel()) * sizeof(float));
  EXPECT_EQ(0, std::memcmp(theirs.raw_data(), logits.data_ptr<float>(), theirs.nbytes()))
      << "Python's logits differ from the C++ model's";
}

// bf16 parameters and gradients (f32 shards): the ranks stay equal and the
// losses follow f32's within bf16's rounding of the whole network.
TEST_F(TorchFsdpTest, Bf16MixedPrecisionTrainsTheSameModel) {
  std::array<std::vector<float>, 2> losses32, losses16;
  std::array<std::vector<Params>, 2> params16;
  for (bool bf16 : {false, true}) {
    testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) -> absl::Status {
      auto model = Build<CharTransformerImpl>(TransformerOptions(true));
      TorchFullyShardOptions options;
      if (bf16) options.mixed_precision = {DType::kBF16, DType::kBF16};
      LOCKSTEP_ASSIGN_OR_RETURN(auto fsdp, FullyShard<CharTransformerImpl>::Create(model, comm, options));
      torch::optim::Adam adam(fsdp->shard_parameters(), torch::optim::AdamOptions(0.01));
      for (int step = 0; step < 4; ++step) {
        LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor logits, fsdp->Forward(Ids(0, step, 0)));
        torch::Tensor loss = CharTransformerLoss(logits.to(torch::kFloat), Ids(0, step + 1, 0));
        loss.backward();
        adam.step();
        adam.zero_grad();
        (bf16 ? losses16 : losses32)[comm.rank()].push_back(loss.item<float>());
      }
      if (bf16) {
        LOCKSTEP_ASSIGN_OR_RETURN(auto state, fsdp->FullStateDict());
        Params p;
        for (const auto& [name, t] : state) p[name] = Flat(t);
        params16[comm.rank()].push_back(p);
        // The shards stay f32 masters.
        for (const at::Tensor& t : fsdp->shard_parameters()) {
          if (t.scalar_type() != torch::kFloat) return absl::InternalError("a shard is not f32");
        }
      }
      return absl::OkStatus();
    }));
  }
  EXPECT_EQ(params16[0], params16[1]);
  EXPECT_EQ(losses16[0], losses16[1]);
  EXPECT_NE(losses16[0], losses32[0]);  // bf16 did run.
  ASSERT_EQ(losses16[0].size(), 4u);
  for (size_t i = 0; i < losses16[0].size(); ++i) {
    // bf16 keeps 8 bits: a few percent over a 3-block network is generous
    // yet far below the loss's own change over the 4 steps.
    EXPECT_NEAR(losses16[0][i], losses32[0][i], 0.05 * losses32[0][i]) << "step " << i;
  }
  EXPECT_LT(losses32[0].back(), losses32[0].front() - 0.2);
}

// A Sharded unit inside another.
struct NestedImpl : torch::nn::Module {
  torch::nn::Sequential body{
      register_module("body", torch::nn::Sequential(Sharded(torch::nn::Sequential(Sharded(torch::nn::Linear(4, 4))))))};
  torch::Tensor forward(torch::Tensor x) { return body->forward(x); }
};

TEST_F(TorchFsdpTest, NestedUnitsAndFrozenParametersAreRefused) {
  testing::ExpectAllOk(testing::RunThreads(1, [&](Communicator& comm) -> absl::Status {
    auto nested = std::make_shared<NestedImpl>();
    std::vector<at::Tensor> before;
    for (const at::Tensor& p : nested->parameters()) before.push_back(p.clone());
    absl::StatusOr<std::unique_ptr<FullyShard<NestedImpl>>> n = FullyShard<NestedImpl>::Create(nested, comm);
    if (n.ok() || n.status().code() != absl::StatusCode::kInvalidArgument ||
        n.status().message().find("Sharded units nest: 'body.0.0' lies inside 'body.0'") == absl::string_view::npos) {
      return absl::InternalError("expected the nesting named, got " + n.status().ToString());
    }
    // Nothing was taken from the module.
    const std::vector<at::Tensor> after = nested->parameters();
    for (size_t i = 0; i < before.size(); ++i) {
      if (!after[i].defined() || after[i].storage().nbytes() == 0 || !after[i].equal(before[i])) {
        return absl::InternalError("a refused Create changed a parameter");
      }
    }

    auto model = Build<CharTransformerImpl>(TransformerOptions(true));
    model->named_parameters()["head.weight"].set_requires_grad(false);
    absl::StatusOr<std::unique_ptr<FullyShard<CharTransformerImpl>>> f =
        FullyShard<CharTransformerImpl>::Create(model, comm);
    if (f.ok() || f.status().code() != absl::StatusCode::kUnimplemented ||
        f.status().message().find("'head.weight' is frozen") == absl::string_view::npos) {
      return absl::InternalError("expected the frozen parameter named, got " + f.status().ToString());
    }
    return absl::OkStatus();
  }));
}

}  // namespace
}  // namespace interop
}  // namespace lockstep
