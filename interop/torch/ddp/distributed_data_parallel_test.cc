// lockstep's DDP for libtorch modules on 2 ranks (threads of this process,
// each with its own module): the averaged gradients equal, bit for bit,
// what the rule says ((g0 * 0.5) + (g1 * 0.5) in f32, from each rank's
// local gradients computed by a plain copy of the module), and the options
// behave as PyTorch's.
#include "interop/torch/ddp/distributed_data_parallel.h"

#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "collectives/testing/group.h"
#include "ddp/comm_hook.h"
#include "gtest/gtest.h"
#include "interop/torch/bridge/tensor_bridge.h"
#include "nn/checkpoint/safetensors.h"

namespace lockstep {
namespace interop {
namespace {

constexpr int kWorld = 2;

struct NetImpl : torch::nn::Module {
  explicit NetImpl(bool with_unused = false) {
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    bn = register_module("bn", torch::nn::BatchNorm1d(16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 4));
    if (with_unused) unused = register_module("unused", torch::nn::Linear(4, 4));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(bn(fc1(x)))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, unused{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};

// Modules are built under one lock: torch's generator is global.
std::shared_ptr<NetImpl> MakeNet(uint64_t seed, bool with_unused = false) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(seed);
  return std::make_shared<NetImpl>(with_unused);
}

torch::Tensor Input(int rank, int step) {
  return torch::arange(6 * 8, torch::kFloat).reshape({6, 8}).mul(0.01 * (rank + 1)).add(0.1 * step).sin();
}
torch::Tensor Target(int rank) { return torch::tensor({0, 1, 2, 3, rank, 1}, torch::kLong); }

torch::Tensor Loss(const torch::Tensor& out, int rank) {
  return torch::nn::functional::cross_entropy(out, Target(rank));
}

// A plain copy of `net` (parameters and buffers), for local gradients.
std::shared_ptr<NetImpl> CopyOf(NetImpl& net, bool with_unused = false) {
  auto copy = MakeNet(99, with_unused);
  torch::NoGradGuard no_grad;
  auto src = net.named_parameters(), dst = copy->named_parameters();
  for (const auto& item : src) dst[item.key()].copy_(item.value());
  auto sb = net.named_buffers(), db = copy->named_buffers();
  for (const auto& item : sb) db[item.key()].copy_(item.value());
  return copy;
}

std::vector<float> Flat(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

// What every rank shares: per rank, per parameter name, local gradients.
struct Shared {
  std::mutex mu;
  std::array<std::map<std::string, std::vector<float>>, kWorld> local;
};

void ExpectAveraged(const Shared& shared, const std::string& name, const at::Tensor& grad) {
  const std::vector<float>& g0 = shared.local[0].at(name);
  const std::vector<float>& g1 = shared.local[1].at(name);
  const std::vector<float> got = Flat(grad);
  ASSERT_EQ(got.size(), g0.size()) << name;
  for (size_t i = 0; i < got.size(); ++i) {
    const float want = g0[i] * 0.5f + g1[i] * 0.5f;
    ASSERT_EQ(std::memcmp(&got[i], &want, sizeof(float)), 0)
        << name << "[" << i << "]: " << got[i] << " expected " << want;
  }
}

class TorchDdpTest : public ::testing::Test {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

// Runs `steps` steps of DDP with `options` and checks every averaged
// gradient against the rule, and that all ranks end with the same bits.
void RunAndCheck(DdpOptions options, int steps, bool fp16_hook = false) {
  Shared shared;
  std::array<std::vector<float>, kWorld> final_params;
  std::array<size_t, kWorld> buckets{};
  const std::vector<absl::Status> results = testing::RunThreads(kWorld, [&](Communicator& comm) -> absl::Status {
    const int rank = comm.rank();
    auto net = MakeNet(/*seed=*/100 + rank);  // Different on purpose: DDP broadcasts rank 0's.
    LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel<NetImpl>::Create(net, comm, options));
    if (fp16_hook) LOCKSTEP_RETURN_IF_ERROR(ddp->RegisterCommHook(MakeFp16CompressHook()));
    torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int step = 0; step < steps; ++step) {
      // Local gradients of this rank's batch, from a plain copy.
      auto reference = CopyOf(*net);
      Loss(reference->forward(Input(rank, step)), rank).backward();
      {
        std::lock_guard<std::mutex> lock(shared.mu);
        shared.local[rank].clear();
        for (const auto& item : reference->named_parameters())
          shared.local[rank][item.key()] = Flat(item.value().grad());
      }
      LOCKSTEP_RETURN_IF_ERROR(comm.Barrier()->Wait());
      LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor out, ddp->Forward(Input(rank, step)));
      Loss(out, rank).backward();
      if (!fp16_hook) {
        for (const auto& item : net->named_parameters()) ExpectAveraged(shared, item.key(), item.value().grad());
      }
      LOCKSTEP_RETURN_IF_ERROR(comm.Barrier()->Wait());  // Before anyone overwrites `shared`.
      sgd.step();
      sgd.zero_grad();
    }
    // A forward in eval mode without gradients: the buffers come from rank
    // 0 again (they diverge in training, each rank's batch statistics) and
    // stay (eval mode does not update them); no backward is prepared.
    net->eval();
    {
      torch::NoGradGuard no_grad;
      LOCKSTEP_RETURN_IF_ERROR(ddp->Forward(Input(rank, 0)).status());
    }
    std::vector<float> all;
    for (const auto& p : net->parameters()) {
      const std::vector<float> f = Flat(p);
      all.insert(all.end(), f.begin(), f.end());
    }
    for (const auto& b : net->named_buffers()) {
      if (b.value().scalar_type() != torch::kFloat) continue;
      const std::vector<float> f = Flat(b.value());
      all.insert(all.end(), f.begin(), f.end());
    }
    final_params[rank] = all;
    buckets[rank] = ddp->bucket_indices().size();
    return absl::OkStatus();
  });
  for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
  ASSERT_FALSE(final_params[0].empty());
  EXPECT_EQ(std::memcmp(final_params[0].data(), final_params[1].data(), final_params[0].size() * sizeof(float)), 0)
      << "the replicas diverged";
  EXPECT_EQ(buckets[0], buckets[1]);
}

TEST_F(TorchDdpTest, AveragesGradientsExactlyAsPyTorchsRule) { RunAndCheck(DdpOptions{}, 3); }

TEST_F(TorchDdpTest, SeveralBucketsGiveTheSameBits) {
  DdpOptions options;
  options.bucket_cap_mb = 0.0005;  // ~524 bytes: fc1's weight alone fills one
  options.first_bucket_bytes = 256;
  RunAndCheck(options, 3);
}

TEST_F(TorchDdpTest, GradientAsBucketViewGivesTheSameBits) {
  DdpOptions options;
  options.gradient_as_bucket_view = true;
  RunAndCheck(options, 3);
}

TEST_F(TorchDdpTest, Fp16HookKeepsReplicasIdentical) { RunAndCheck(DdpOptions{}, 2, /*fp16_hook=*/true); }

TEST_F(TorchDdpTest, GradientAsBucketViewMakesTheGradientABucketView) {
  DdpOptions options;
  options.gradient_as_bucket_view = true;
  const std::vector<absl::Status> results = testing::RunThreads(kWorld, [&](Communicator& comm) -> absl::Status {
    auto net = MakeNet(7);
    LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel<NetImpl>::Create(net, comm, options));
    std::vector<const void*> first;
    for (int step = 0; step < 3; ++step) {
      LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor out, ddp->Forward(Input(comm.rank(), step)));
      Loss(out, comm.rank()).backward();
      std::vector<const void*> now;
      for (const auto& p : net->parameters()) now.push_back(p.grad().data_ptr());
      // From the second step (after the buckets were rebuilt) the gradients
      // stay where their bucket views are.
      if (step == 1) first = now;
      if (step == 2 && now != first) return absl::InternalError("gradients moved out of their bucket views");
      // As PyTorch's: narrow() views of one bucket tensor (the model is one
      // bucket), so they alias each other and tile its storage exactly.
      std::vector<std::pair<int64_t, int64_t>> ranges;
      int64_t total = 0;
      for (const auto& p : net->parameters()) {
        if (!p.grad().is_alias_of(net->parameters()[0].grad())) {
          return absl::InternalError("a gradient is not a view of the same bucket tensor");
        }
        if (!p.grad().is_contiguous() || p.grad().sizes() != p.sizes()) {
          return absl::InternalError("a gradient view has another shape than its parameter");
        }
        ranges.emplace_back(p.grad().storage_offset(), p.numel());
        total += p.numel();
      }
      std::sort(ranges.begin(), ranges.end());
      int64_t next = 0;
      for (const auto& [offset, numel] : ranges) {
        if (offset != next) return absl::InternalError(absl::StrCat("a gap or overlap at element ", offset));
        next = offset + numel;
      }
      const int64_t bucket_elements =
          static_cast<int64_t>(net->parameters()[0].grad().storage().nbytes() / sizeof(float));
      if (next != total || bucket_elements != total) {
        return absl::InternalError(absl::StrCat("the views cover ", next, " of ", bucket_elements, " elements"));
      }
      for (auto& p : net->parameters()) p.mutable_grad().zero_();
    }
    return absl::OkStatus();
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

// The header's route to starting weights, as written there: a safetensors
// file loaded into the libtorch module itself before Create.
absl::Status LoadWeights(const std::string& path, NetImpl* model) {
  LOCKSTEP_ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensorsFile(path));
  torch::NoGradGuard no_grad;
  auto params = model->named_parameters(), buffers = model->named_buffers();
  for (auto& [name, value] : file.tensors) {
    LOCKSTEP_ASSIGN_OR_RETURN(at::Tensor t, ToTorch(value));
    (params.contains(name) ? params[name] : buffers[name]).copy_(t);
  }
  return absl::OkStatus();
}

// Rank 0 loads a trained model's file (parameters and buffers, the
// BatchNorm's running statistics moved off their initial values); after
// Create every rank holds exactly those values and, as a fresh PyTorch
// module does, no gradient at all.
TEST_F(TorchDdpTest, WeightsLoadedBeforeCreateReachEveryRank) {
  auto trained = MakeNet(5);
  {
    torch::NoGradGuard no_grad;
    trained->bn->running_mean.add_(0.5);
    trained->bn->running_var.mul_(3);
  }
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& item : trained->named_parameters()) tensors.emplace_back(item.key(), *FromTorch(item.value()));
  for (const auto& item : trained->named_buffers()) tensors.emplace_back(item.key(), *FromTorch(item.value()));
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/trained.safetensors";
  ASSERT_TRUE(WriteSafetensorsFile(path, tensors).ok());
  const std::vector<absl::Status> results = testing::RunThreads(kWorld, [&](Communicator& comm) -> absl::Status {
    auto net = MakeNet(100 + comm.rank());
    if (comm.rank() == 0) LOCKSTEP_RETURN_IF_ERROR(LoadWeights(path, net.get()));
    LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel<NetImpl>::Create(net, comm));
    auto want_params = trained->named_parameters(), want_buffers = trained->named_buffers();
    for (const auto& item : net->named_parameters()) {
      if (!torch::equal(item.value(), want_params[item.key()])) return absl::InternalError(item.key() + " differs");
      if (item.value().grad().defined()) return absl::InternalError(item.key() + " has a gradient before backward");
    }
    for (const auto& item : net->named_buffers()) {
      if (!torch::equal(item.value(), want_buffers[item.key()])) return absl::InternalError(item.key() + " differs");
    }
    return absl::OkStatus();
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

TEST_F(TorchDdpTest, NoSyncAccumulatesLocallyThenReducesTheSum) {
  Shared shared;
  const std::vector<absl::Status> results = testing::RunThreads(kWorld, [&](Communicator& comm) -> absl::Status {
    const int rank = comm.rank();
    auto net = MakeNet(3);
    LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel<NetImpl>::Create(net, comm, DdpOptions{}));
    auto reference = CopyOf(*net);
    for (int step = 0; step < 3; ++step) Loss(reference->forward(Input(rank, step)), rank).backward();
    {
      std::lock_guard<std::mutex> lock(shared.mu);
      for (const auto& item : reference->named_parameters()) shared.local[rank][item.key()] = Flat(item.value().grad());
    }
    LOCKSTEP_RETURN_IF_ERROR(comm.Barrier()->Wait());
    {
      auto scope = ddp->NoSync();
      for (int step = 0; step < 2; ++step) {
        LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor out, ddp->Forward(Input(rank, step)));
        Loss(out, rank).backward();
      }
    }
    // Still local: this rank's own sum of two steps.
    LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor out, ddp->Forward(Input(rank, 2)));
    Loss(out, rank).backward();
    for (const auto& item : net->named_parameters()) ExpectAveraged(shared, item.key(), item.value().grad());
    return absl::OkStatus();
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

TEST_F(TorchDdpTest, FrozenParametersAreBroadcastButNotAveraged) {
  std::array<std::vector<float>, kWorld> frozen;
  std::array<std::vector<std::string>, kWorld> names;
  const std::vector<absl::Status> results = testing::RunThreads(kWorld, [&](Communicator& comm) -> absl::Status {
    auto net = MakeNet(50 + comm.rank());
    net->fc1->weight.set_requires_grad(false);
    LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel<NetImpl>::Create(net, comm, DdpOptions{}));
    names[comm.rank()] = ddp->parameter_names();
    LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor out, ddp->Forward(Input(comm.rank(), 0)));
    Loss(out, comm.rank()).backward();
    if (net->fc1->weight.grad().defined()) return absl::InternalError("a frozen parameter got a gradient");
    frozen[comm.rank()] = Flat(net->fc1->weight);
    return absl::OkStatus();
  });
  for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(frozen[0], frozen[1]);  // Broadcast from rank 0 all the same.
  EXPECT_EQ(names[0], (std::vector<std::string>{"fc1.bias", "bn.weight", "bn.bias", "fc2.weight", "fc2.bias"}));
}

TEST_F(TorchDdpTest, UnusedParametersNeedFindUnusedParameters) {
  for (const bool find_unused : {false, true}) {
    SCOPED_TRACE(find_unused ? "find_unused_parameters" : "default");
    DdpOptions options;
    options.find_unused_parameters = find_unused;
    const std::vector<absl::Status> results = testing::RunThreads(kWorld, [&](Communicator& comm) -> absl::Status {
      auto net = MakeNet(5, /*with_unused=*/true);
      LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel<NetImpl>::Create(net, comm, options));
      for (int step = 0; step < 2; ++step) {
        LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor out, ddp->Forward(Input(comm.rank(), step)));
        Loss(out, comm.rank()).backward();
        if (net->unused->weight.grad().defined()) return absl::InternalError("the unused layer got a gradient");
      }
      return absl::OkStatus();
    });
    for (const absl::Status& s : results) {
      if (find_unused) {
        EXPECT_TRUE(s.ok()) << s;
      } else {
        EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
        EXPECT_NE(s.message().find("Expected to have finished reduction in the prior iteration"), std::string::npos);
        EXPECT_NE(s.message().find("unused.weight"), std::string::npos) << s;
      }
    }
  }
}

// One Linear registered under two names and applied twice: its parameters
// count once (the first name), and its gradient (both uses accumulated by
// one AccumulateGrad) is averaged once.
struct SharedNetImpl : torch::nn::Module {
  SharedNetImpl() {
    first = register_module("first", torch::nn::Linear(4, 4));
    second = register_module("second", first);  // the same module again
  }
  torch::Tensor forward(const torch::Tensor& x) { return second(torch::relu(first(x))); }
  torch::nn::Linear first{nullptr}, second{nullptr};
};

TEST_F(TorchDdpTest, ASharedParameterIsAveragedOnce) {
  Shared shared;
  std::array<std::vector<std::string>, kWorld> names;
  const std::vector<absl::Status> results = testing::RunThreads(kWorld, [&](Communicator& comm) -> absl::Status {
    const int rank = comm.rank();
    auto net = std::make_shared<SharedNetImpl>();
    LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel<SharedNetImpl>::Create(net, comm, DdpOptions{}));
    names[rank] = ddp->parameter_names();
    const torch::Tensor x = Input(rank, 0).slice(1, 0, 4);
    // Local gradients from a plain copy with the same weights.
    auto copy = std::make_shared<SharedNetImpl>();
    {
      torch::NoGradGuard no_grad;
      copy->first->weight.copy_(net->first->weight);
      copy->first->bias.copy_(net->first->bias);
    }
    copy->forward(x).square().sum().backward();
    {
      std::lock_guard<std::mutex> lock(shared.mu);
      shared.local[rank]["first.weight"] = Flat(copy->first->weight.grad());
      shared.local[rank]["first.bias"] = Flat(copy->first->bias.grad());
    }
    LOCKSTEP_RETURN_IF_ERROR(comm.Barrier()->Wait());
    LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor out, ddp->Forward(x));
    out.square().sum().backward();
    ExpectAveraged(shared, "first.weight", net->first->weight.grad());
    ExpectAveraged(shared, "first.bias", net->first->bias.grad());
    return absl::OkStatus();
  });
  for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(names[0], (std::vector<std::string>{"first.weight", "first.bias"}));
}

struct OtherNetImpl : torch::nn::Module {
  explicit OtherNetImpl(int width) { fc = register_module("fc", torch::nn::Linear(8, width)); }
  torch::Tensor forward(const torch::Tensor& x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};

TEST_F(TorchDdpTest, DifferentModelsAreRefusedOnEveryRank) {
  const std::vector<absl::Status> results = testing::RunThreads(kWorld, [&](Communicator& comm) -> absl::Status {
    auto net = std::make_shared<OtherNetImpl>(comm.rank() == 0 ? 4 : 5);
    return DistributedDataParallel<OtherNetImpl>::Create(net, comm).status();
  });
  for (const absl::Status& s : results) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    // Each rank names its own view first.
    EXPECT_TRUE(s.message().find("parameter 0 (fc.weight) is [4, 8] f32 on rank 0 but [5, 8] f32 on rank 1") !=
                    std::string::npos ||
                s.message().find("parameter 0 (fc.weight) is [5, 8] f32 on rank 1 but [4, 8] f32 on rank 0") !=
                    std::string::npos)
        << s;
  }
}

// A comm hook whose reduction fails (an all-reduce the communicator
// refuses): the error comes out of loss.backward() as a c10::Error with
// lockstep's message, and the next Forward returns it as a Status.
class RefusedHook : public CommHook {
 public:
  std::string name() const override { return "refused"; }
  std::shared_ptr<Work> Run(Communicator& comm, GradBucket&) override {
    return comm.AllReduce(Tensor(), ReduceOp::kSum);
  }
};

TEST_F(TorchDdpTest, AnErrorInsideBackwardIsRaisedThereAndReturnedByTheNextForward) {
  const std::vector<absl::Status> results = testing::RunThreads(kWorld, [&](Communicator& comm) -> absl::Status {
    auto net = MakeNet(9);
    LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel<NetImpl>::Create(net, comm, DdpOptions{}));
    LOCKSTEP_RETURN_IF_ERROR(ddp->RegisterCommHook(std::make_unique<RefusedHook>()));
    LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor out, ddp->Forward(Input(comm.rank(), 0)));
    std::string raised;
    try {
      Loss(out, comm.rank()).backward();
    } catch (const c10::Error& e) {
      raised = e.what();
    }
    if (raised.find("lockstep DistributedDataParallel") == std::string::npos) {
      return absl::InternalError(absl::StrCat("backward raised no lockstep error: '", raised, "'"));
    }
    absl::Status next = ddp->Forward(Input(comm.rank(), 1)).status();
    if (next.ok()) return absl::InternalError("the next Forward did not return the error");
    if (raised.find(std::string(next.message())) == std::string::npos) {
      return absl::InternalError(absl::StrCat("backward raised '", raised, "' but Forward returned ", next.ToString()));
    }
    return absl::OkStatus();
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

// Hooks of a backward that no Forward of ours prepared (a second backward
// through a retained graph) are ignored, and the next Forward starts afresh.
TEST_F(TorchDdpTest, ABackwardWithoutOurForwardIsIgnored) {
  const std::vector<absl::Status> results = testing::RunThreads(kWorld, [&](Communicator& comm) -> absl::Status {
    auto net = MakeNet(9);
    LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel<NetImpl>::Create(net, comm, DdpOptions{}));
    LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor out, ddp->Forward(Input(comm.rank(), 0)));
    torch::Tensor loss = Loss(out, comm.rank());
    loss.backward({}, /*retain_graph=*/true);
    loss.backward();  // Local only: accumulates into the averaged gradients.
    return ddp->Forward(Input(comm.rank(), 1)).status();
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace interop
}  // namespace lockstep
