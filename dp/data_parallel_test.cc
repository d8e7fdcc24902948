// DataParallel against one device: DP over 2 and 3 CPU devices with global
// batch B equals one device on batch B after 5 SGD steps (|d| <= 1e-5|x| +
// 1e-7 per element), for B that divides evenly, B that does not and B
// smaller than the device count; BatchNorm running statistics follow
// PyTorch (replica 0's); the one-device path is the module itself; the
// reduction is deterministic; errors as PyTorch's or our own; a failing
// replica names its device and leaves the module unchanged.
#include "dp/data_parallel.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/kernels.h"
#include "core/mt19937.h"
#include "gtest/gtest.h"
#include "nn/batch_norm.h"
#include "nn/checkpoint/state_dict_prefix.h"
#include "nn/cross_entropy.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "nn/relu.h"
#include "nn/sequential.h"
#include "nn/sgd.h"

namespace lockstep {
namespace {

constexpr int kSteps = 5;
constexpr int64_t kFeatures = 20;
constexpr int64_t kClasses = 4;

std::vector<Device> CpuDevices(int n) {
  std::vector<Device> d;
  for (int i = 0; i < n; ++i) d.push_back(Device::Cpu(i));
  return d;
}

std::unique_ptr<Module> MakeModel(bool batch_norm) {
  Mt19937 gen(1234);
  if (batch_norm) {
    auto model = std::make_unique<Sequential>();
    EXPECT_TRUE(model->Add("fc1", *Linear::Create({kFeatures, 24}, gen)).ok());
    BatchNormOptions bn;
    bn.num_features = 24;
    EXPECT_TRUE(model->Add("bn", *BatchNorm1d::Create(bn)).ok());
    EXPECT_TRUE(model->Add("relu", std::make_unique<ReLU>()).ok());
    EXPECT_TRUE(model->Add("fc2", *Linear::Create({24, kClasses}, gen)).ok());
    return model;
  }
  MlpOptions mlp;
  mlp.sizes = {kFeatures, 32, 16, kClasses};
  mlp.flatten = false;
  return std::move(*MakeMlp(mlp, gen));
}

struct Batch {
  Tensor x, y;
};
Batch MakeBatch(int step, int64_t rows) {
  Mt19937 gen(static_cast<uint64_t>(1000 + step));
  Batch b{*Tensor::Empty({rows, kFeatures}, DType::kF32), *Tensor::Empty({rows}, DType::kI64)};
  for (int64_t i = 0; i < rows * kFeatures; ++i) {
    b.x.data<float>()[i] = static_cast<float>(gen.Next32() / 4294967296.0 * 2 - 1);
  }
  for (int64_t i = 0; i < rows; ++i) b.y.data<int64_t>()[i] = static_cast<int64_t>(gen.Next32() % kClasses);
  return b;
}

std::unique_ptr<Sgd> MakeSgd(Module& model) {
  SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  return *Sgd::Create(model.NamedParameters(), o);
}

// Parameters, then f32 buffers.
std::vector<std::vector<float>> Snapshot(Module& model) {
  std::vector<std::vector<float>> out;
  for (const NamedParameter& p : model.NamedParameters()) out.push_back(*p.parameter->value.ToVector<float>());
  for (const NamedTensor& e : model.NamedBuffers()) {
    if (e.second.dtype() == DType::kF32) out.push_back(*e.second.ToVector<float>());
  }
  return out;
}

void ExpectClose(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t t = 0; t < got.size(); ++t) {
    ASSERT_EQ(got[t].size(), want[t].size());
    int bad = 0;
    for (size_t i = 0; i < got[t].size(); ++i) {
      const double d = std::fabs(double{got[t][i]} - want[t][i]);
      if (d > 1e-5 * std::fabs(want[t][i]) + 1e-7 && ++bad <= 3) {
        ADD_FAILURE() << what << ": tensor " << t << " element " << i << ": " << got[t][i] << " vs " << want[t][i];
      }
    }
  }
}

// One device, the whole batch.
std::vector<std::vector<float>> TrainSingle(int64_t batch) {
  std::unique_ptr<Module> model = MakeModel(false);
  std::unique_ptr<Sgd> sgd = MakeSgd(*model);
  for (int s = 0; s < kSteps; ++s) {
    Batch b = MakeBatch(s, batch);
    CrossEntropyResult ce = *CrossEntropy(*model->Forward(b.x), b.y);
    EXPECT_TRUE(model->Backward(ce.grad_logits, false).ok());
    EXPECT_TRUE(sgd->Step().ok());
    EXPECT_TRUE(model->ZeroGrad().ok());
  }
  return Snapshot(*model);
}

struct DpRun {
  std::vector<std::vector<float>> state;
  std::vector<int> replicas_per_step;
};

DpRun TrainDp(int devices, int64_t batch, bool batch_norm = false) {
  std::unique_ptr<Module> model = MakeModel(batch_norm);
  std::unique_ptr<Sgd> sgd = MakeSgd(*model);
  DataParallelOptions options;
  options.device_ids = CpuDevices(devices);
  std::unique_ptr<DataParallel> dp = *DataParallel::Create(*model, options);
  DpRun run;
  dp->SetPhaseObserver([&](const DpPhaseTiming& t) {
    if (!t.backward && std::string(t.phase) == "apply") run.replicas_per_step.push_back(t.replicas);
  });
  for (int s = 0; s < kSteps; ++s) {
    Batch b = MakeBatch(s, batch);
    Tensor logits = *dp->Forward(b.x);
    EXPECT_EQ(logits.device(), Device::Cpu(0));
    EXPECT_EQ(logits.shape(), (Shape{batch, kClasses}));
    CrossEntropyResult ce = *CrossEntropy(logits, b.y);
    absl::StatusOr<Tensor> g = dp->Backward(ce.grad_logits);
    EXPECT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(sgd->Step().ok());
    EXPECT_TRUE(model->ZeroGrad().ok());
  }
  run.state = Snapshot(*model);
  return run;
}

struct Case {
  int devices;
  int64_t batch;
  int replicas;  // torch.chunk's count
};

class EquivalenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(EquivalenceTest, MatchesOneDeviceAfterFiveSgdSteps) {
  const Case c = GetParam();
  DpRun dp = TrainDp(c.devices, c.batch);
  ExpectClose(dp.state, TrainSingle(c.batch), absl::StrCat(c.devices, " devices, batch ", c.batch));
  EXPECT_EQ(dp.replicas_per_step, std::vector<int>(kSteps, c.replicas));
}

INSTANTIATE_TEST_SUITE_P(Batches, EquivalenceTest,
                         ::testing::Values(Case{2, 16, 2}, Case{2, 7, 2}, Case{3, 16, 3}, Case{3, 7, 3}, Case{3, 2, 2},
                                           Case{2, 1, 1}, Case{3, 4, 2}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return absl::StrCat(info.param.devices, "devices_batch", info.param.batch);
                         });

TEST(DataParallel, DeterministicGradients) {
  EXPECT_EQ(TrainDp(3, 13).state, TrainDp(3, 13).state);  // bit for bit
}

TEST(DataParallel, OneDeviceIsTheModuleItself) {
  EXPECT_EQ(TrainDp(1, 9).state, TrainSingle(9));  // bit for bit: no replica
}

// PyTorch's replica 0 shares the module's buffers: each chunk is normalized
// with its own statistics and only chunk 0's running statistics (and one
// num_batches_tracked increment) reach the module. One device reproduces
// that: chunk 0, then chunk 1 with the loss gradient of the whole batch's
// mean, then chunk 1's statistics update undone.
// A BatchNorm replica on cpu:1 keeps every tensor there (forward and
// backward run).
bool BatchNormWorksOnCpu1() {
  BatchNormOptions bn;
  bn.num_features = 3;
  bn.device = Device::Cpu(1);
  std::unique_ptr<BatchNorm1d> layer = *BatchNorm1d::Create(bn);
  Tensor x = *Tensor::Zeros({2, 3}, DType::kF32, Device::Cpu(1));
  if (!layer->Forward(x).ok()) return false;
  return layer->Backward(x, false).ok();
}

TEST(DataParallel, BatchNormFollowsReplicaZero) {
  ASSERT_TRUE(BatchNormWorksOnCpu1());
  constexpr int64_t kBatch = 10;
  std::unique_ptr<Module> model = MakeModel(true);
  std::unique_ptr<Sgd> sgd = MakeSgd(*model);
  for (int s = 0; s < kSteps; ++s) {
    Batch b = MakeBatch(s, kBatch);
    std::vector<Tensor> saved;
    for (int64_t half = 0; half < 2; ++half) {
      Tensor x = *b.x.Slice(half * 5, half * 5 + 5);
      Tensor y = *b.y.Slice(half * 5, half * 5 + 5);
      Tensor logits = *model->Forward(x);
      if (half == 0) {
        for (const NamedTensor& e : model->NamedBuffers()) saved.push_back(*e.second.Clone());
      } else {
        std::vector<NamedTensor> buffers = model->NamedBuffers();
        for (size_t k = 0; k < buffers.size(); ++k) EXPECT_TRUE(buffers[k].second.CopyFrom(saved[k]).ok());
      }
      CrossEntropyResult ce = *CrossEntropy(logits, y);
      EXPECT_TRUE(Scale(ce.grad_logits, 5.0 / kBatch).ok());  // mean over the whole batch
      EXPECT_TRUE(model->Backward(ce.grad_logits, false).ok());
    }
    EXPECT_TRUE(sgd->Step().ok());
    EXPECT_TRUE(model->ZeroGrad().ok());
  }
  ExpectClose(TrainDp(2, kBatch, /*batch_norm=*/true).state, Snapshot(*model), "BatchNorm");
  std::unique_ptr<Module> dp_model = MakeModel(true);
  DataParallelOptions options;
  options.device_ids = CpuDevices(2);
  std::unique_ptr<DataParallel> dp = *DataParallel::Create(*dp_model, options);
  ASSERT_TRUE(dp->Forward(MakeBatch(0, kBatch).x).ok());
  EXPECT_EQ(dp_model->NamedBuffers().back().first, "bn.num_batches_tracked");
  EXPECT_EQ(dp_model->NamedBuffers().back().second.data<int64_t>()[0], 1);
}

TEST(DataParallel, InputGradientGatheredOnTheInputDevice) {
  std::unique_ptr<Module> single = MakeModel(false);
  std::unique_ptr<Module> model = MakeModel(false);
  DataParallelOptions options;
  options.device_ids = CpuDevices(3);
  std::unique_ptr<DataParallel> dp = *DataParallel::Create(*model, options);
  Batch b = MakeBatch(0, 8);
  CrossEntropyResult ce = *CrossEntropy(*single->Forward(b.x), b.y);
  Tensor want = *single->Backward(ce.grad_logits, true);
  Tensor got = *dp->Backward(
      *[&] {
        (void)*dp->Forward(b.x);
        return absl::StatusOr<Tensor>(ce.grad_logits);
      }(),
      true);
  EXPECT_EQ(got.device(), Device::Cpu(0));
  ExpectClose({*got.ToVector<float>()}, {*want.ToVector<float>()}, "input gradient");
}

TEST(DataParallel, OutputDevice) {
  std::unique_ptr<Module> model = MakeModel(false);
  DataParallelOptions options;
  options.device_ids = CpuDevices(2);
  options.output_device = Device::Cpu(1);
  std::unique_ptr<DataParallel> dp = *DataParallel::Create(*model, options);
  EXPECT_EQ(dp->Forward(MakeBatch(0, 6).x)->device(), Device::Cpu(1));
}

TEST(DataParallel, StateDictHasThePlainNamesAndLoadsEitherForm) {
  std::unique_ptr<Module> model = MakeModel(false);
  std::unique_ptr<DataParallel> dp = *DataParallel::Create(*model, {});
  std::vector<NamedTensor> state = dp->StateDict();
  EXPECT_EQ(state[0].first, "0.weight");
  std::vector<NamedTensor> prefixed;
  for (const NamedTensor& e : state) {
    Tensor t = *e.second.Clone();
    if (t.dtype() == DType::kF32) t.data<float>()[0] = 42.0f;
    prefixed.emplace_back("module." + e.first, t);
  }
  ASSERT_TRUE(dp->LoadStateDict(prefixed).ok());
  EXPECT_EQ(model->StateDict()[0].second.data<float>()[0], 42.0f);
  EXPECT_TRUE(dp->LoadStateDict(model->StateDict()).ok());
}

TEST(DataParallel, Errors) {
  std::unique_ptr<Module> model = MakeModel(false);
  DataParallelOptions options;
  options.device_ids = std::vector<Device>{};
  EXPECT_EQ(DataParallel::Create(*model, options).status().message(),
            "DataParallel: device_ids is empty; list at least one device, or leave it unset for every "
            "CUDA device");
  options.device_ids = {Device::Cpu(0), Device::Cpu(1), Device::Cpu(0)};
  EXPECT_EQ(DataParallel::Create(*model, options).status().message(),
            "DataParallel: device cpu:0 is listed twice in device_ids (positions 0 and 2); list each "
            "device once");
  options.device_ids = {Device::Cpu(0), Device::Cuda(0)};
  EXPECT_FALSE(DataParallel::Create(*model, options).ok());
  // PyTorch's message: the module lives on cpu:0, device_ids[0] is cpu:1.
  options.device_ids = {Device::Cpu(1), Device::Cpu(0)};
  EXPECT_EQ(DataParallel::Create(*model, options).status().message(),
            "module must have its parameters and buffers on device cpu:1 (device_ids[0]) but found one "
            "of them on device: cpu:0");
  options.device_ids = CpuDevices(2);
  std::unique_ptr<DataParallel> dp = *DataParallel::Create(*model, options);
  EXPECT_EQ(dp->Backward(*Tensor::Zeros({2, kClasses}, DType::kF32)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A parameter moved after Create is caught by Forward.
  Tensor& w = model->NamedParameters()[0].parameter->value;
  Tensor saved = w;
  w = *w.To(Device::Cpu(3));
  EXPECT_EQ(dp->Forward(MakeBatch(0, 4).x).status().message(),
            "module must have its parameters and buffers on device cpu:0 (device_ids[0]) but found one "
            "of them on device: cpu:3");
  w = saved;
  EXPECT_FALSE(dp->Forward(*Tensor::Zeros({0, kFeatures}, DType::kF32)).ok());  // empty batch
}

// A Linear that fails in forward or backward on one device.
class FailOn : public Module {
 public:
  static std::unique_ptr<FailOn> Make(Device fail_device, bool in_backward, Device device, Mt19937* gen) {
    std::unique_ptr<FailOn> m(new FailOn(fail_device, in_backward));
    LinearOptions o{kFeatures, kClasses};
    o.device = device;
    m->linear_ = static_cast<Linear*>(m->RegisterModule("fc", gen ? *Linear::Create(o, *gen) : *Linear::Create(o)));
    return m;
  }
  absl::string_view type_name() const override { return "FailOn"; }
  absl::StatusOr<Tensor> Forward(const Tensor& x) override {
    if (!in_backward_ && x.device() == fail_device_) return absl::InternalError("injected forward failure");
    return linear_->Forward(x);
  }

 protected:
  absl::StatusOr<Tensor> BackwardImpl(const Tensor& g, bool input_grad, const ParameterReadyFn& ready) override {
    if (in_backward_ && g.device() == fail_device_) return absl::InternalError("injected backward failure");
    return ChildBackward(*linear_, g, input_grad, ready);
  }
  absl::StatusOr<std::unique_ptr<Module>> NewLike(Device device) const override {
    return std::unique_ptr<Module>(Make(fail_device_, in_backward_, device, nullptr));
  }

 private:
  FailOn(Device fail_device, bool in_backward) : fail_device_(fail_device), in_backward_(in_backward) {}
  Device fail_device_;
  bool in_backward_;
  Linear* linear_ = nullptr;
};

TEST(DataParallel, FailingReplicaNamesItsDeviceAndLeavesTheModuleUnchanged) {
  for (bool in_backward : {false, true}) {
    Mt19937 gen(5);
    std::unique_ptr<FailOn> model = FailOn::Make(Device::Cpu(2), in_backward, Device::Cpu(0), &gen);
    DataParallelOptions options;
    options.device_ids = CpuDevices(3);
    std::unique_ptr<DataParallel> dp = *DataParallel::Create(*model, options);
    // One good step first, so that the module has gradients to keep.
    Batch b = MakeBatch(0, 2);  // 2 rows: replicas 0 and 1 only, no failure
    ASSERT_TRUE(dp->Backward(*CrossEntropy(*dp->Forward(b.x), b.y)->grad_logits.Clone()).ok());
    std::vector<std::vector<float>> values = Snapshot(*model), grads;
    for (Parameter* p : model->Parameters()) grads.push_back(*p->grad.ToVector<float>());

    b = MakeBatch(1, 9);
    absl::Status s;
    absl::StatusOr<Tensor> logits = dp->Forward(b.x);
    if (!in_backward) {
      s = logits.status();
      EXPECT_EQ(s.message(), "replica 2 on device cpu:2: injected forward failure");
    } else {
      ASSERT_TRUE(logits.ok());
      s = dp->Backward(CrossEntropy(*logits, b.y)->grad_logits).status();
      EXPECT_EQ(s.message(), "replica 2 on device cpu:2: injected backward failure");
    }
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
    EXPECT_EQ(Snapshot(*model), values);
    for (size_t k = 0; k < grads.size(); ++k) EXPECT_EQ(*model->Parameters()[k]->grad.ToVector<float>(), grads[k]);
  }
}

}  // namespace
}  // namespace lockstep
