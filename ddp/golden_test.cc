// DistributedDataParallel against PyTorch 1.13's own DDP (gloo, 2 ranks):
// ddp/testdata/*.safetensors hold the initial parameters, each rank's data,
// the averaged gradients and parameters after every step, each rank's
// losses, the gradients the fp16 hook received, and the buckets PyTorch's
// reducer used (made by make_ddp_golden.py; see testdata/README.md). Each
// case runs here on 2 ranks (threads, real TCP), bucket for bucket.
//
// What may legitimately differ from PyTorch, and how each check bounds it:
//   * each rank's f32 gradient: another GEMM summation order (OpenBLAS picks
//     its kernel per CPU), FMA or not, exp/log ulps. Bounded by the radius of
//     nn/testing/error_bound.h around an f64 reference of the network;
//     ours and PyTorch's must both lie inside it.
//   * the averaged gradient without a hook: g0 * 0.5 + g1 * 0.5, in f32: the
//     same radius carried through, plus one rounding.
//   * with fp16_compress_hook: the hook itself is checked bit for bit, on
//     each side's own pre-hook gradients, against PyTorch's definition
//     written out below (Fp16Hook); its output may differ between the two
//     sides only because its f32 inputs may, so it is bounded by the hook's
//     values at the two ends of the inputs' radius (the hook is monotone).
//   * SGD: elementwise f32 arithmetic, each operation one rounding.
// Each step starts from PyTorch's parameters and momentum buffer after the
// step before, so a rounding difference of one step cannot grow into the
// next (a buffer is rebuilt bit for bit from PyTorch's averaged gradients:
// buf = grad on the first step, then buf * 0.9f + grad, as torch.optim.SGD).
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/testing/group.h"
#include "core/half.h"
#include "core/status.h"
#include "ddp/distributed_data_parallel.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "nn/checkpoint/safetensors.h"
#include "nn/cross_entropy.h"
#include "nn/linear.h"
#include "nn/relu.h"
#include "nn/sequential.h"
#include "nn/sgd.h"
#include "nn/testing/error_bound.h"

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

namespace eb = error_bound;

// PyTorch 1.13's fp16_compress_hook on two ranks' f32 values, from its
// definition (default_hooks.py), with the scalar conversions of core/half.h
// (independent of the kernels our hook uses):
//   compressed = buffer.to(torch.float16).div_(world_size)
//       cast to f16; the division computed in f32 and rounded to f16
//   dist.all_reduce(compressed)        SUM of two f16 values, rounded once
//   buffer.copy_(compressed)           widening to f32, exact
float Fp16Hook(float g0, float g1) {
  auto half = [](float x) { return HalfToFloat(FloatToHalf(x)); };
  return half(half(half(g0) / kRanks) + half(half(g1) / kRanks));
}

// The golden's momentum buffers after steps 0..k-1, rebuilt as SGD does.
std::vector<Tensor> MomentumBuffers(const Golden& golden, const std::vector<std::string>& names, int k) {
  std::vector<Tensor> bufs(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    for (int s = 0; s < k; ++s) {
      const std::string key = absl::StrCat("step", s, ".grad.", names[i]);
      if (!golden.has(key)) continue;
      const Tensor& g = golden[key];
      if (!bufs[i].defined()) {  // torch.clone(grad)
        bufs[i] = *Tensor::FromVector<float>(*g.ToVector<float>(), g.shape());
        continue;
      }
      float* b = bufs[i].data<float>();
      const float* gv = g.data<float>();
      for (int64_t j = 0; j < g.numel(); ++j) b[j] = b[j] * 0.9f + gv[j];
    }
  }
  return bufs;
}

// The reference of rank r's local gradient at step k (micro-batches summed
// as autograd accumulates them), per parameter; empty for a parameter the
// network does not use.
struct RankReference {
  std::vector<eb::Bounded> losses;  // per micro-batch
  std::vector<eb::Matrix> grads;    // per parameter
};

RankReference ReferenceOf(const Golden& golden, const std::vector<Tensor>& params, int rank, int step,
                          int micro_batches) {
  std::vector<eb::Matrix> weights, biases;
  for (size_t i = 0; i + 1 < params.size() && weights.size() < 3; i += 2) {  // fc1..fc3; fc_unused is never called
    weights.push_back(eb::FromTensor(params[i]));
    biases.push_back(eb::FromTensor(params[i + 1]));
  }
  RankReference out;
  out.grads.resize(params.size());
  for (int m = 0; m < micro_batches; ++m) {
    const std::string prefix = micro_batches == 1 ? absl::StrCat("rank", rank, ".step", step, ".")
                                                  : absl::StrCat("rank", rank, ".step", step, ".micro", m, ".");
    const eb::MlpReference ref =
        eb::MlpForwardBackward(eb::FromTensor(golden[prefix + "x"]), weights, biases, eb::Labels(golden[prefix + "y"]));
    out.losses.push_back(ref.loss);
    for (size_t l = 0; l < 3; ++l) {
      for (size_t which = 0; which < 2; ++which) {
        const eb::Matrix& g = which == 0 ? ref.weight_grads[l] : ref.bias_grads[l];
        eb::Matrix& acc = out.grads[2 * l + which];
        if (acc.x.empty()) {
          acc = g;
        } else {
          for (size_t j = 0; j < acc.x.size(); ++j) acc.x[j] = eb::Add(acc.x[j], g.x[j]);
        }
      }
    }
  }
  return out;
}

// What one rank records of each step, for the checks after both ranks ran.
struct Recorded {
  std::vector<std::map<size_t, std::vector<float>>> pre_hook;   // [step][param] this rank's bucket input
  std::vector<std::map<size_t, std::vector<float>>> post_hook;  // [step][param] its averaged grad
};

// Wraps a hook and keeps what each bucket held before it ran.
class RecordingHook : public CommHook {
 public:
  RecordingHook(std::unique_ptr<CommHook> inner, Recorded* out) : inner_(std::move(inner)), out_(out) {}
  std::string name() const override { return inner_->name(); }
  std::shared_ptr<Work> Run(Communicator& comm, GradBucket& bucket) override {
    const float* b = bucket.buffer().data<float>();
    for (size_t i = 0; i < bucket.size(); ++i) {
      out_->pre_hook.back()[bucket.indices()[i]] =
          std::vector<float>(b + bucket.offsets()[i], b + bucket.offsets()[i] + bucket.lengths()[i]);
    }
    return inner_->Run(comm, bucket);
  }

 private:
  std::unique_ptr<CommHook> inner_;
  Recorded* out_;
};

eb::Matrix Interval(const std::vector<float>& lo, const std::vector<float>& hi) {
  eb::Matrix m(1, static_cast<int64_t>(lo.size()));
  for (size_t j = 0; j < lo.size(); ++j) m.x[j] = {0.5 * (double{lo[j]} + hi[j]), 0.5 * (double{hi[j]} - lo[j])};
  return m;
}

absl::Status RunRank(const Golden& golden, const std::string& name, Communicator& comm, Recorded& recorded) {
  const nlohmann::json config = golden.meta("config");
  const bool unused = config.value("find_unused_parameters", false);
  const bool fp16 = config.value("hook", std::string()) == "fp16_compress_hook";
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
  if (fp16)
    LOCKSTEP_RETURN_IF_ERROR(ddp->RegisterCommHook(std::make_unique<RecordingHook>(MakeFp16CompressHook(), &recorded)));
  SgdOptions sgd_options;
  sgd_options.lr = 0.1;
  sgd_options.momentum = 0.9;
  eb::SgdConfig ref_sgd;
  ref_sgd.lr = 0.1, ref_sgd.momentum = 0.9;
  LOCKSTEP_ASSIGN_OR_RETURN(auto sgd, Sgd::Create(model->NamedParameters(), sgd_options));
  const std::vector<NamedParameter> params = model->NamedParameters();
  std::vector<std::string> names;
  for (const NamedParameter& p : params) names.push_back(p.name);
  for (const NamedParameter& p : params) {
    if (*p.parameter->value.ToVector<float>() != *golden["init." + p.name].ToVector<float>()) {
      return absl::InternalError(
          absl::StrCat("rank ", comm.rank(), ": after the broadcast, ", p.name, " is not rank 0's initial value"));
    }
  }
  const int micro_batches = golden.meta("micro_batches").get<int>();
  const nlohmann::json buckets_after = golden.meta("buckets_after_step");
  const int other = 1 - comm.rank();
  for (int step = 0; step < 5; ++step) {
    // Start from PyTorch's parameters and momentum buffers.
    const std::string before = step == 0 ? "init." : absl::StrCat("step", step - 1, ".");
    std::vector<NamedTensor> values, state;
    std::vector<Tensor> start;
    const std::vector<Tensor> bufs = MomentumBuffers(golden, names, step);
    for (size_t i = 0; i < params.size(); ++i) {
      values.push_back({names[i], golden[before + names[i]]});
      start.push_back(golden[before + names[i]]);
      if (bufs[i].defined()) state.push_back({absl::StrCat("state.", i, ".momentum_buffer"), bufs[i]});
    }
    LOCKSTEP_RETURN_IF_ERROR(model->LoadStateDict(values));
    if (step > 0) LOCKSTEP_RETURN_IF_ERROR(sgd->LoadStateTensors(state));
    const RankReference mine = ReferenceOf(golden, start, comm.rank(), step, micro_batches);
    const RankReference theirs = ReferenceOf(golden, start, other, step, micro_batches);

    recorded.pre_hook.emplace_back();
    LOCKSTEP_RETURN_IF_ERROR(model->ZeroGrad(/*set_to_none=*/true));
    for (int m = 0; m < micro_batches; ++m) {
      const std::string prefix = micro_batches == 1
                                     ? absl::StrCat("rank", comm.rank(), ".step", step, ".")
                                     : absl::StrCat("rank", comm.rank(), ".step", step, ".micro", m, ".");
      auto run = [&]() -> absl::Status {
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, ddp->Forward(golden[prefix + "x"]));
        LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, golden[prefix + "y"]));
        LOCKSTEP_RETURN_IF_ERROR(eb::ExpectWithin(ce.loss, mine.losses[m], "our " + prefix + "loss"));
        LOCKSTEP_RETURN_IF_ERROR(
            eb::ExpectWithin(golden[prefix + "loss"].data<float>()[0], mine.losses[m], "PyTorch's " + prefix + "loss"));
        return ddp->Backward(ce.grad_logits);
      };
      if (m + 1 < micro_batches) {
        auto no_sync = ddp->NoSync();
        LOCKSTEP_RETURN_IF_ERROR(run());
      } else {
        LOCKSTEP_RETURN_IF_ERROR(run());
      }
    }
    recorded.post_hook.emplace_back();
    std::vector<eb::Matrix> averaged(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string key = absl::StrCat("step", step, ".grad.", names[i]);
      const std::string what = absl::StrCat("rank ", comm.rank(), " ", key);
      if (mine.grads[i].x.empty()) {  // never used: no grad here nor in PyTorch
        if (golden.has(key)) return absl::InternalError(absl::StrCat(what, ": PyTorch has a grad, the reference none"));
        if (params[i].parameter->grad.defined())
          return absl::InternalError(absl::StrCat(what, ": PyTorch has no grad"));
        continue;
      }
      const Tensor& got = params[i].parameter->grad;
      recorded.post_hook.back()[i] = *got.ToVector<float>();
      if (fp16) {
        // Each side's pre-hook gradients within the reference's radius.
        const std::string local = absl::StrCat("rank", comm.rank(), ".step", step, ".local_grad.", names[i]);
        LOCKSTEP_RETURN_IF_ERROR(eb::ExpectWithin(golden[local], mine.grads[i], "PyTorch's " + local));
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor pre, Tensor::FromVector<float>(recorded.pre_hook.back()[i]));
        LOCKSTEP_RETURN_IF_ERROR(eb::ExpectWithin(pre, mine.grads[i], "our pre-hook gradient " + local));
        // The hook at both ends of its inputs' radius.
        const eb::Matrix& a = comm.rank() == 0 ? mine.grads[i] : theirs.grads[i];
        const eb::Matrix& b = comm.rank() == 0 ? theirs.grads[i] : mine.grads[i];
        std::vector<float> lo(a.x.size()), hi(a.x.size());
        for (size_t j = 0; j < a.x.size(); ++j) {
          lo[j] = Fp16Hook(static_cast<float>(a.x[j].v - a.x[j].e), static_cast<float>(b.x[j].v - b.x[j].e));
          hi[j] = Fp16Hook(static_cast<float>(a.x[j].v + a.x[j].e), static_cast<float>(b.x[j].v + b.x[j].e));
        }
        averaged[i] = Interval(lo, hi);
      } else {
        // g0 * 0.5 + g1 * 0.5 (the reducer scales each gradient as it copies it into the bucket).
        averaged[i] = mine.grads[i];
        for (size_t j = 0; j < averaged[i].x.size(); ++j) {
          averaged[i].x[j] =
              eb::Add(eb::Mul(mine.grads[i].x[j], eb::Exact(0.5)), eb::Mul(theirs.grads[i].x[j], eb::Exact(0.5)));
        }
      }
      LOCKSTEP_RETURN_IF_ERROR(eb::ExpectWithin(got, averaged[i], "our " + what));
      LOCKSTEP_RETURN_IF_ERROR(eb::ExpectWithin(golden[key], averaged[i], "PyTorch's " + key));
    }
    LOCKSTEP_RETURN_IF_ERROR(sgd->Step());
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string key = absl::StrCat("step", step, ".", names[i]);
      const std::string what = absl::StrCat("rank ", comm.rank(), " ", key);
      if (averaged[i].x.empty()) {  // skipped by SGD: unchanged
        if (*params[i].parameter->value.ToVector<float>() != *start[i].ToVector<float>() ||
            *golden[key].ToVector<float>() != *start[i].ToVector<float>()) {
          return absl::InternalError(absl::StrCat(what, ": a parameter without a grad changed"));
        }
        continue;
      }
      eb::Matrix buf = bufs[i].defined() ? eb::FromTensor(bufs[i]) : eb::Matrix();
      const eb::Matrix want = eb::SgdStep(ref_sgd, eb::FromTensor(start[i]), averaged[i], buf);
      LOCKSTEP_RETURN_IF_ERROR(eb::ExpectWithin(params[i].parameter->value, want, "our " + what));
      LOCKSTEP_RETURN_IF_ERROR(eb::ExpectWithin(golden[key], want, "PyTorch's " + key));
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
      return absl::InternalError(absl::StrCat(name, ": buckets after step ", step, " are ", nlohmann::json(ours).dump(),
                                              ", PyTorch's ", buckets_after[step].dump()));
    }
  }
  return absl::OkStatus();
}

// The fp16 hook, bit for bit, on each side's own pre-hook gradients: ours
// as recorded by RecordingHook, PyTorch's as its hook received them.
void ExpectFp16HookExact(const Golden& golden, const std::vector<Recorded>& recorded) {
  const std::vector<std::string> names = golden.meta("parameters").get<std::vector<std::string>>();
  int64_t checked = 0;
  for (size_t step = 0; step < recorded[0].post_hook.size(); ++step) {
    for (const auto& [i, got] : recorded[0].post_hook[step]) {
      const std::vector<float>& a = recorded[0].pre_hook[step].at(i);
      const std::vector<float>& b = recorded[1].pre_hook[step].at(i);
      const std::vector<float> ta =
          *golden[absl::StrCat("rank0.step", step, ".local_grad.", names[i])].ToVector<float>();
      const std::vector<float> tb =
          *golden[absl::StrCat("rank1.step", step, ".local_grad.", names[i])].ToVector<float>();
      const std::vector<float> want = *golden[absl::StrCat("step", step, ".grad.", names[i])].ToVector<float>();
      for (size_t j = 0; j < got.size(); ++j, ++checked) {
        ASSERT_EQ(got[j], Fp16Hook(a[j], b[j]))
            << "our hook, step " << step << " " << names[i] << "[" << j << "] from pre-hook " << a[j] << ", " << b[j];
        ASSERT_EQ(recorded[1].post_hook[step].at(i)[j], got[j]) << "rank 1, step " << step << " " << names[i];
        ASSERT_EQ(want[j], Fp16Hook(ta[j], tb[j])) << "PyTorch's hook, step " << step << " " << names[i] << "[" << j
                                                   << "] from its pre-hook " << ta[j] << ", " << tb[j];
      }
    }
  }
  EXPECT_EQ(checked, 5 * 5072 / 4);  // every element of every step
}

void ExpectMatchesPyTorch(const std::string& name) {
  const Golden golden(name);
  std::vector<Recorded> recorded(kRanks);
  const std::vector<absl::Status> results = testing::RunThreads(
      kRanks, [&](Communicator& comm) { return RunRank(golden, name, comm, recorded[comm.rank()]); });
  for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(results[r].ok()) << name << ", rank " << r << ": " << results[r];
  if (golden.meta("config").value("hook", std::string()) == "fp16_compress_hook" && results[0].ok() &&
      results[1].ok()) {
    ExpectFp16HookExact(golden, recorded);
  }
}

TEST(DdpGoldenTest, Plain) { ExpectMatchesPyTorch("ddp_plain"); }
TEST(DdpGoldenTest, SeveralBuckets) { ExpectMatchesPyTorch("ddp_buckets"); }
TEST(DdpGoldenTest, OneBucketPerParameter) { ExpectMatchesPyTorch("ddp_buckets_per_param"); }
TEST(DdpGoldenTest, Fp16CompressHook) { ExpectMatchesPyTorch("ddp_fp16"); }
TEST(DdpGoldenTest, NoSync) { ExpectMatchesPyTorch("ddp_no_sync"); }
TEST(DdpGoldenTest, FindUnusedParameters) { ExpectMatchesPyTorch("ddp_unused"); }

}  // namespace
}  // namespace lockstep
