// lockstep's DDP for libtorch against PyTorch's own Python DDP, live: the
// test runs testdata/torch_ddp_reference.py (gloo, 2 ranks, one thread
// each; twice, and requires the two runs to agree byte for byte), then the
// same models, inputs and cases through interop::DistributedDataParallel
// on 2 ranks, and requires every loss, every averaged gradient, every
// parameter and every f32 buffer (BatchNorm's running statistics) after
// every optimizer step to be bit-identical.
//
// Why bit-identical is the right bar: both sides run libtorch 1.13's CPU
// kernels on the same machine, with one intra-op thread, in the same order
// (the models are written op for op alike: interop/torch/models/golden_blocks.h and
// golden_blocks.py); DDP's arithmetic is the same rule (each
// gradient times 1/world into its bucket, a 2-rank sum; fp16: cast, divide
// in f16, sum, cast back); and torch::optim::SGD is the same update as
// torch.optim.SGD. Nothing may legitimately differ.
#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collectives/testing/group.h"
#include "core/deadline.h"
#include "core/status.h"
#include "core/subprocess.h"
#include "ddp/comm_hook.h"
#include "gtest/gtest.h"
#include "interop/torch/bridge/tensor_bridge.h"
#include "interop/torch/ddp/distributed_data_parallel.h"
#include "interop/torch/models/golden_blocks.h"
#include "nn/checkpoint/safetensors.h"

namespace lockstep {
namespace interop {
namespace {

constexpr int kWorld = 2, kSteps = 3;

struct Case {
  const char* name;
  DdpOptions options;
  int micro = 1;
  bool scale_loss = false;  // each micro-batch's loss / micro (accumulation's recipe)
  bool with_unused = false;
  bool frozen = false;
  bool fp16 = false;
};

// As testdata/torch_ddp_reference.py's CASES.
std::vector<Case> Cases() {
  std::vector<Case> cases;
  cases.push_back({"plain", {}});
  Case buckets{"buckets", {}};
  buckets.options.bucket_cap_mb = 0.001;
  buckets.options.first_bucket_bytes = 1048;
  cases.push_back(buckets);
  Case view{"gradient_as_bucket_view", {}};
  view.options.gradient_as_bucket_view = true;
  cases.push_back(view);
  Case no_sync{"no_sync", {}};
  no_sync.micro = 2;
  cases.push_back(no_sync);
  Case accumulate{"accumulate", {}};
  accumulate.micro = 2;
  accumulate.scale_loss = true;
  cases.push_back(accumulate);
  Case unused{"unused", {}};
  unused.options.find_unused_parameters = true;
  unused.with_unused = true;
  cases.push_back(unused);
  Case frozen{"frozen", {}};
  frozen.frozen = true;
  cases.push_back(frozen);
  Case fp16{"fp16", {}};
  fp16.fp16 = true;
  cases.push_back(fp16);
  return cases;
}

std::string Runfile(const std::string& path) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"), "/", path);
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

using Tensors = std::map<std::string, Tensor>;

absl::StatusOr<Tensors> Load(const std::string& path) {
  LOCKSTEP_ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensorsFile(path));
  Tensors out;
  for (auto& [name, t] : file.tensors) out[name] = t;
  return out;
}

// Runs PyTorch's DDP once, into `dir`.
absl::Status RunReference(const std::string& dir) {
  SubprocessOptions options;
  options.argv = {"/usr/bin/python3", Runfile("interop/torch/ddp/testdata/torch_ddp_reference.py"),
                  Runfile("interop/torch/ddp/testdata/torch_ddp_inputs.safetensors"), dir};
  options.env = {{"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}, {"GLOO_SOCKET_IFNAME", "lo"}};
  LOCKSTEP_ASSIGN_OR_RETURN(Subprocess child, Subprocess::Spawn(options));
  LOCKSTEP_ASSIGN_OR_RETURN(ExitStatus status, child.Wait(DeadlineIn(std::chrono::seconds(240))));
  if (!status.success()) {
    return absl::InternalError(absl::StrCat("torch_ddp_reference.py ", status.ToString(), " (its output is above)"));
  }
  return absl::OkStatus();
}

// An error naming the first element where `got` differs from `want` in
// its bits, or OK.
absl::Status SameBits(const std::string& what, const at::Tensor& got_torch, const Tensors& expected) {
  auto it = expected.find(what);
  if (it == expected.end()) return absl::NotFoundError(absl::StrCat(what, ": PyTorch has no such result"));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor got, FromTorch(got_torch.contiguous()));
  const Tensor& want = it->second;
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    return absl::InternalError(
        absl::StrCat(what, ": lockstep has ", got.DebugString(), ", PyTorch ", want.DebugString()));
  }
  const float* g = got.data<float>();
  const float* w = want.data<float>();
  for (int64_t i = 0; i < got.numel(); ++i) {
    uint32_t gb, wb;
    std::memcpy(&gb, &g[i], sizeof(gb));
    std::memcpy(&wb, &w[i], sizeof(wb));
    if (gb != wb) {
      return absl::InternalError(absl::StrFormat(
          "%s[%d]: lockstep %.9g (0x%08x), PyTorch %.9g (0x%08x): not bit-identical", what, i, g[i], gb, w[i], wb));
    }
  }
  return absl::OkStatus();
}

template <typename M>
absl::Status RunRank(Communicator& comm, const std::string& model_name, const Case& c, const Tensors& inputs,
                     const Tensors& expected, size_t* compared) {
  const int rank = comm.rank();
  auto model = std::make_shared<M>(c.with_unused);
  {
    torch::NoGradGuard no_grad;
    for (auto& item : model->named_parameters()) {
      auto it = inputs.find(absl::StrCat("init/", model_name, "/", item.key()));
      if (it == inputs.end()) return absl::NotFoundError(absl::StrCat("no initial value for ", item.key()));
      LOCKSTEP_ASSIGN_OR_RETURN(at::Tensor init, ToTorch(it->second));
      item.value().copy_(init);
      if (rank != 0) item.value().add_(1.0);  // DDP's broadcast from rank 0 must undo this.
    }
  }
  if (c.frozen) {
    const std::string frozen = model_name == "resnet" ? "stem_conv.weight" : "ln1.weight";
    model->named_parameters()[frozen].set_requires_grad(false);
  }
  LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel<M>::Create(model, comm, c.options));
  if (c.fp16) LOCKSTEP_RETURN_IF_ERROR(ddp->RegisterCommHook(MakeFp16CompressHook()));
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < kSteps; ++step) {
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();  // zero_grad(set_to_none=True)
    const std::string prefix = absl::StrCat(model_name, "/", c.name, "/step", step);
    for (int m = 0; m < c.micro; ++m) {
      const std::string data = absl::StrCat("data/", model_name, "/rank", rank, "/step", step, "/micro", m);
      LOCKSTEP_ASSIGN_OR_RETURN(at::Tensor x, ToTorch(inputs.at(data + "/x")));
      LOCKSTEP_ASSIGN_OR_RETURN(at::Tensor y, ToTorch(inputs.at(data + "/y")));
      torch::Tensor loss;
      const int divisor = c.scale_loss ? c.micro : 1;
      if (m < c.micro - 1) {
        auto no_sync = ddp->NoSync();
        LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor out, ddp->Forward(x));
        loss = torch::nn::functional::cross_entropy(out, y) / divisor;
        loss.backward();
      } else {
        LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor out, ddp->Forward(x));
        loss = torch::nn::functional::cross_entropy(out, y) / divisor;
        loss.backward();
      }
      LOCKSTEP_RETURN_IF_ERROR(SameBits(absl::StrCat(prefix, "/loss", m), loss.detach().reshape({1}), expected));
      ++*compared;
    }
    for (const auto& item : model->named_parameters()) {
      const std::string key = absl::StrCat(prefix, "/grad/", item.key());
      if (!item.value().grad().defined()) {
        if (expected.count(key) > 0) return absl::InternalError(absl::StrCat(key, ": PyTorch has it, lockstep none"));
        continue;
      }
      LOCKSTEP_RETURN_IF_ERROR(SameBits(key, item.value().grad(), expected));
      ++*compared;
    }
    sgd.step();
    for (const auto& item : model->named_parameters()) {
      LOCKSTEP_RETURN_IF_ERROR(SameBits(absl::StrCat(prefix, "/param/", item.key()), item.value(), expected));
      ++*compared;
    }
    // BatchNorm's running statistics: each rank's own inside no_sync, rank
    // 0's broadcast before a forward that follows a synchronized one.
    for (const auto& item : model->named_buffers()) {
      if (item.value().scalar_type() != at::kFloat) continue;
      LOCKSTEP_RETURN_IF_ERROR(SameBits(absl::StrCat(prefix, "/buffer/", item.key()), item.value(), expected));
      ++*compared;
    }
  }
  return absl::OkStatus();
}

class DdpGoldenTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    at::set_num_threads(1);
    const std::string root = std::getenv("TEST_TMPDIR");
    const std::string first = root + "/reference1", second = root + "/reference2";
    for (const std::string& dir : {first, second}) {
      std::filesystem::create_directories(dir);
      setup_ = RunReference(dir);
      if (!setup_.ok()) return;
    }
    for (int r = 0; r < kWorld; ++r) {
      const std::string name = absl::StrCat("/rank", r, ".safetensors");
      if (ReadBytes(first + name) != ReadBytes(second + name)) {
        setup_ = absl::InternalError(absl::StrCat(
            "PyTorch's reference is not repeatable: two runs of torch_ddp_reference.py wrote different ", name,
            "; a nondeterministic kernel (see the GELU note in models/golden_blocks.py) makes it no reference"));
        return;
      }
    }
    absl::StatusOr<Tensors> inputs = Load(Runfile("interop/torch/ddp/testdata/torch_ddp_inputs.safetensors"));
    if (!inputs.ok()) {
      setup_ = inputs.status();
      return;
    }
    inputs_ = new Tensors(std::move(*inputs));
    for (int r = 0; r < kWorld; ++r) {
      absl::StatusOr<Tensors> out = Load(absl::StrCat(first, "/rank", r, ".safetensors"));
      if (!out.ok()) {
        setup_ = out.status();
        return;
      }
      expected_[r] = new Tensors(std::move(*out));
    }
  }

  template <typename M>
  void Check(const std::string& model_name) {
    ASSERT_TRUE(setup_.ok()) << setup_;
    size_t compared[kWorld] = {0, 0};
    for (const Case& c : Cases()) {
      SCOPED_TRACE(c.name);
      const std::vector<absl::Status> results = testing::RunThreads(kWorld, [&](Communicator& comm) {
        return RunRank<M>(comm, model_name, c, *inputs_, *expected_[comm.rank()], &compared[comm.rank()]);
      });
      for (size_t r = 0; r < results.size(); ++r) EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
    }
    // Every result PyTorch wrote for this model was compared.
    for (int r = 0; r < kWorld; ++r) {
      size_t want = 0;
      for (const auto& [key, value] : *expected_[r]) want += key.rfind(model_name + "/", 0) == 0 ? 1 : 0;
      EXPECT_EQ(compared[r], want) << "rank " << r;
      EXPECT_GT(want, 100u);
    }
  }

  static absl::Status setup_;
  static Tensors* inputs_;
  static Tensors* expected_[kWorld];
};

absl::Status DdpGoldenTest::setup_;
Tensors* DdpGoldenTest::inputs_ = nullptr;
Tensors* DdpGoldenTest::expected_[kWorld] = {nullptr, nullptr};

TEST_F(DdpGoldenTest, ResNetIsBitIdenticalToPyTorchDdp) { Check<GoldenResNet>("resnet"); }

TEST_F(DdpGoldenTest, TransformerBlockIsBitIdenticalToPyTorchDdp) { Check<GoldenTransformer>("transformer"); }

// A checkpoint of the trained module loads in a Python PyTorch program: the
// plain module's names (DDP does not wrap it), written as safetensors from
// bridged tensors, loaded with load_state_dict(strict=True) into the Python
// model (testdata/load_checkpoint.py says how), which then computes what the
// C++ model computes, bit for bit.
TEST_F(DdpGoldenTest, ACheckpointOfTheTrainedModelLoadsInPythonPyTorch) {
  ASSERT_TRUE(setup_.ok()) << setup_;
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::string ckpt = dir + "/trained.safetensors", out = dir + "/python_logits.safetensors";
  at::Tensor probe, logits;
  const std::vector<absl::Status> results = testing::RunThreads(kWorld, [&](Communicator& comm) -> absl::Status {
    auto model = std::make_shared<GoldenResNet>(false);
    LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel<GoldenResNet>::Create(model, comm));
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int step = 0; step < 2; ++step) {
      const std::string data = absl::StrCat("data/resnet/rank", comm.rank(), "/step", step, "/micro0");
      LOCKSTEP_ASSIGN_OR_RETURN(at::Tensor x, ToTorch(inputs_->at(data + "/x")));
      LOCKSTEP_ASSIGN_OR_RETURN(at::Tensor y, ToTorch(inputs_->at(data + "/y")));
      LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor output, ddp->Forward(x));
      torch::nn::functional::cross_entropy(output, y).backward();
      sgd.step();
      sgd.zero_grad();
    }
    if (comm.rank() != 0) return absl::OkStatus();
    // The plain module's state, as PyTorch's state_dict() names it.
    std::vector<std::pair<std::string, Tensor>> state;
    for (const auto& item : model->named_parameters()) {
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, FromTorch(item.value().detach()));
      state.emplace_back(item.key(), t);
    }
    for (const auto& item : model->named_buffers()) {
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, FromTorch(item.value()));
      state.emplace_back(item.key(), t);
    }
    probe = ToTorch(inputs_->at("data/resnet/rank1/step2/micro0/x")).value();
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor x, FromTorch(probe));
    state.emplace_back("probe.x", x);
    LOCKSTEP_RETURN_IF_ERROR(WriteSafetensorsFile(ckpt, state, {}));
    model->eval();
    torch::NoGradGuard no_grad;
    logits = model->forward(probe).contiguous();
    return absl::OkStatus();
  });
  for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
  SubprocessOptions options;
  options.argv = {"/usr/bin/python3", Runfile("interop/torch/ddp/testdata/load_checkpoint.py"), ckpt, "resnet", out};
  options.env = {{"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}};
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
  ASSERT_TRUE(child.ok()) << child.status();
  absl::StatusOr<ExitStatus> status = child->Wait(DeadlineIn(std::chrono::seconds(120)));
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_TRUE(status->success()) << "load_checkpoint.py " << status->ToString();
  absl::StatusOr<Tensors> python = Load(out);
  ASSERT_TRUE(python.ok()) << python.status();
  const absl::Status same = SameBits("logits", logits, *python);
  EXPECT_TRUE(same.ok()) << same;
}

}  // namespace
}  // namespace interop
}  // namespace lockstep
