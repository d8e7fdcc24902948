// DistributedDataParallel against PyTorch 1.13's own DDP (gloo, 2 ranks):
// ddp/testdata/*.safetensors hold the initial parameters, each rank's data,
// the averaged gradients and parameters after every step, each rank's
// losses, and the buckets PyTorch's reducer used (made by
// make_ddp_golden.py; see testdata/README.md). Each case runs here on 2
// ranks (threads, real TCP) and must match within |d| <= 1e-5|x| + 1e-7,
// bucket for bucket.
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/testing/group.h"
#include "core/status.h"
#include "ddp/distributed_data_parallel.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "nn/cross_entropy.h"
#include "nn/linear.h"
#include "nn/relu.h"
#include "nn/safetensors.h"
#include "nn/sequential.h"
#include "nn/sgd.h"

namespace lockstep {
namespace {

constexpr int kRanks = 2;

// fc1(20, 32), relu, fc2(32, 16), relu, fc3(16, 4), and for the unused case
// fc_unused(16, 4), registered last and never called.
class GoldenNet : public Module {
 public:
  static std::unique_ptr<GoldenNet> Make(bool with_unused) {
    auto m = std::unique_ptr<GoldenNet>(new GoldenNet());
    m->fc1_ = m->RegisterModule("fc1", *Linear::Create({20, 32}));
    m->relu1_ = m->RegisterModule("relu1", std::make_unique<ReLU>());
    m->fc2_ = m->RegisterModule("fc2", *Linear::Create({32, 16}));
    m->relu2_ = m->RegisterModule("relu2", std::make_unique<ReLU>());
    m->fc3_ = m->RegisterModule("fc3", *Linear::Create({16, 4}));
    if (with_unused) m->RegisterModule("fc_unused", *Linear::Create({16, 4}));
    return m;
  }
  absl::string_view type_name() const override { return "GoldenNet"; }
  absl::StatusOr<Tensor> Forward(const Tensor& x) override {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor h, fc1_->Forward(x));
    LOCKSTEP_ASSIGN_OR_RETURN(h, relu1_->Forward(h));
    LOCKSTEP_ASSIGN_OR_RETURN(h, fc2_->Forward(h));
    LOCKSTEP_ASSIGN_OR_RETURN(h, relu2_->Forward(h));
    return fc3_->Forward(h);
  }

 protected:
  absl::StatusOr<Tensor> BackwardImpl(const Tensor& grad, bool input_grad, const ParameterReadyFn& ready) override {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor g, ChildBackward(*fc3_, grad, true, ready));
    LOCKSTEP_ASSIGN_OR_RETURN(g, ChildBackward(*relu2_, g, true, ready));
    LOCKSTEP_ASSIGN_OR_RETURN(g, ChildBackward(*fc2_, g, true, ready));
    LOCKSTEP_ASSIGN_OR_RETURN(g, ChildBackward(*relu1_, g, true, ready));
    return ChildBackward(*fc1_, g, input_grad, ready);
  }
  absl::StatusOr<std::unique_ptr<Module>> NewLike(Device) const override {
    return absl::UnimplementedError("GoldenNet is not cloned in this test");
  }

 private:
  GoldenNet() = default;
  Module *fc1_ = nullptr, *relu1_ = nullptr, *fc2_ = nullptr, *relu2_ = nullptr, *fc3_ = nullptr;
};

class Golden {
 public:
  explicit Golden(const std::string& name) {
    absl::StatusOr<SafetensorsFile> file = ReadSafetensorsFile(absl::StrCat("ddp/testdata/", name, ".safetensors"));
    EXPECT_TRUE(file.ok()) << file.status();
    if (!file.ok()) return;
    for (auto& [key, tensor] : file->tensors) tensors_[key] = tensor;
    metadata_ = file->metadata;
  }
  const Tensor& operator[](const std::string& key) const {
    static const Tensor* missing = new Tensor();
    auto it = tensors_.find(key);
    return it == tensors_.end() ? *missing : it->second;
  }
  bool has(const std::string& key) const { return tensors_.count(key) > 0; }
  nlohmann::json meta(const std::string& key) const { return nlohmann::json::parse(metadata_.at(key)); }

 private:
  std::map<std::string, Tensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// fp16 compression rounds each averaged gradient to f16: an f32 gradient a
// few f32 ulps away from PyTorch's (another GEMM) can round to the
// neighbouring f16 value, 2^-11 relative. ddp_test checks the cast rules
// bit for bit against our own gradients.
double g_relative = 1e-5;

absl::Status Close(const Tensor& got, const Tensor& want, const std::string& what) {
  if (!want.defined()) return absl::InternalError(absl::StrCat(what, ": missing from the golden file"));
  if (!got.defined()) return absl::InternalError(absl::StrCat(what, ": undefined here"));
  if (got.numel() != want.numel()) return absl::InternalError(absl::StrCat(what, ": element counts differ"));
  const std::vector<float> g = *got.ToVector<float>(), w = *want.ToVector<float>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (!(std::fabs(g[i] - w[i]) <= g_relative * std::fabs(w[i]) + 1e-7)) {
      return absl::InternalError(absl::StrCat(what, "[", i, "] is ", g[i], ", PyTorch's ", w[i]));
    }
  }
  return absl::OkStatus();
}

absl::Status RunRank(const Golden& golden, const std::string& name, Communicator& comm) {
  const nlohmann::json config = golden.meta("config");
  const bool unused = config.value("find_unused_parameters", false);
  std::unique_ptr<GoldenNet> model = GoldenNet::Make(unused);
  std::vector<NamedTensor> init;
  for (const NamedParameter& p : model->NamedParameters()) init.push_back({p.name, golden["init." + p.name]});
  LOCKSTEP_RETURN_IF_ERROR(model->LoadStateDict(init));
  if (comm.rank() == 1) {
    // As the generator did: rank 1 starts off, DDP's broadcast must fix it.
    for (Parameter* p : model->Parameters()) {
      float* v = p->value.data<float>();
      for (int64_t i = 0; i < p->value.numel(); ++i) v[i] += 1.0f;
    }
  }
  DdpOptions options;
  options.bucket_cap_mb = config.value("bucket_cap_mb", 25.0);
  options.first_bucket_bytes = config.value("first_bucket_bytes", size_t{1} << 20);
  options.find_unused_parameters = unused;
  LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*model, comm, options));
  if (config.value("hook", std::string()) == "fp16_compress_hook") {
    LOCKSTEP_RETURN_IF_ERROR(ddp->RegisterCommHook(MakeFp16CompressHook()));
  }
  SgdOptions sgd_options;
  sgd_options.lr = 0.1;
  sgd_options.momentum = 0.9;
  LOCKSTEP_ASSIGN_OR_RETURN(auto sgd, Sgd::Create(model->NamedParameters(), sgd_options));
  const std::vector<NamedParameter> params = model->NamedParameters();
  for (const NamedParameter& p : params) {
    LOCKSTEP_RETURN_IF_ERROR(Close(p.parameter->value, golden["init." + p.name], "after the broadcast, " + p.name));
  }
  const int micro_batches = golden.meta("micro_batches").get<int>();
  const nlohmann::json buckets_after = golden.meta("buckets_after_step");
  for (int step = 0; step < 5; ++step) {
    LOCKSTEP_RETURN_IF_ERROR(model->ZeroGrad(/*set_to_none=*/true));
    for (int m = 0; m < micro_batches; ++m) {
      const std::string prefix = micro_batches == 1 ? absl::StrCat("rank", comm.rank(), ".step", step, ".")
                                                    : absl::StrCat("rank", comm.rank(), ".step", step, ".micro", m, ".");
      auto run = [&]() -> absl::Status {
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, ddp->Forward(golden[prefix + "x"]));
        LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, golden[prefix + "y"]));
        const float want = golden[prefix + "loss"].data<float>()[0];
        if (!(std::fabs(ce.loss - want) <= 1e-5 * std::fabs(want) + 1e-6)) {
          return absl::InternalError(absl::StrCat(prefix, "loss is ", ce.loss, ", PyTorch's ", want));
        }
        return ddp->Backward(ce.grad_logits);
      };
      if (m + 1 < micro_batches) {
        auto no_sync = ddp->NoSync();
        LOCKSTEP_RETURN_IF_ERROR(run());
      } else {
        LOCKSTEP_RETURN_IF_ERROR(run());
      }
    }
    for (const NamedParameter& p : params) {
      const std::string key = absl::StrCat("step", step, ".grad.", p.name);
      if (!golden.has(key)) {
        if (p.parameter->grad.defined()) return absl::InternalError(absl::StrCat(key, ": PyTorch has no grad"));
        continue;
      }
      LOCKSTEP_RETURN_IF_ERROR(Close(p.parameter->grad, golden[key], absl::StrCat("rank ", comm.rank(), " ", key)));
    }
    LOCKSTEP_RETURN_IF_ERROR(sgd->Step());
    for (const NamedParameter& p : params) {
      const std::string key = absl::StrCat("step", step, ".", p.name);
      LOCKSTEP_RETURN_IF_ERROR(Close(p.parameter->value, golden[key], absl::StrCat("rank ", comm.rank(), " ", key)));
    }
    // The buckets PyTorch's reducer had after this step (rebuilt after the
    // first unless find_unused_parameters).
    std::vector<std::vector<std::string>> ours;
    for (const auto& bucket : ddp->bucket_indices()) {
      ours.emplace_back();
      for (size_t i : bucket) ours.back().push_back(params[i].name);
    }
    // Both rebuild at the forward after the first step.
    if (ours != buckets_after[step].get<std::vector<std::vector<std::string>>>()) {
      return absl::InternalError(absl::StrCat(name, ": buckets after step ", step, " are ",
                                              nlohmann::json(ours).dump(), ", PyTorch's ",
                                              buckets_after[step].dump()));
    }
  }
  return absl::OkStatus();
}

void ExpectMatchesPyTorch(const std::string& name) {
  const Golden golden(name);
  const std::vector<absl::Status> results =
      testing::RunThreads(kRanks, [&](Communicator& comm) { return RunRank(golden, name, comm); });
  for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(results[r].ok()) << name << ", rank " << r << ": " << results[r];
}

TEST(DdpGoldenTest, Plain) { ExpectMatchesPyTorch("ddp_plain"); }
TEST(DdpGoldenTest, SeveralBuckets) { ExpectMatchesPyTorch("ddp_buckets"); }
TEST(DdpGoldenTest, OneBucketPerParameter) { ExpectMatchesPyTorch("ddp_buckets_per_param"); }
TEST(DdpGoldenTest, Fp16CompressHook) {
  g_relative = 1.0 / 1024;  // One f16 rounding step (2^-11), twice.
  ExpectMatchesPyTorch("ddp_fp16");
  g_relative = 1e-5;
}
TEST(DdpGoldenTest, NoSync) { ExpectMatchesPyTorch("ddp_no_sync"); }
TEST(DdpGoldenTest, FindUnusedParameters) { ExpectMatchesPyTorch("ddp_unused"); }

}  // namespace
}  // namespace lockstep
