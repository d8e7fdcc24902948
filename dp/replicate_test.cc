// Replicate: deep copies with the source's names, values and mode on each
// device, not sharing storage; CopyStateTo refreshes a replica after the
// source changed and refuses a module that is not a copy.
#include "dp/replicate.h"

#include <cstring>
#include <memory>
#include <vector>

#include "core/mt19937.h"
#include "gtest/gtest.h"
#include "nn/batch_norm.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "nn/sequential.h"

namespace lockstep {
namespace {

std::unique_ptr<Sequential> MakeModel() {
  Mt19937 gen(7);
  auto model = std::make_unique<Sequential>();
  model->Add(*Linear::Create({6, 5}, gen));
  BatchNormOptions bn;
  bn.num_features = 5;
  model->Add(*BatchNorm1d::Create(bn));
  return model;
}

TEST(Replicate, CopiesOnEachDevice) {
  // An MLP: nn's BatchNorm keeps some tensors on cpu:0 for any cpu:N.
  Mt19937 gen(7);
  MlpOptions o;
  o.sizes = {6, 5, 3};
  std::unique_ptr<Sequential> model = *MakeMlp(o, gen);
  model->Eval();
  const std::vector<Device> devices = {Device::Cpu(0), Device::Cpu(1), Device::Cpu(2)};
  std::vector<std::unique_ptr<Module>> replicas = *Replicate(*model, devices);
  ASSERT_EQ(replicas.size(), 3u);
  const std::vector<NamedTensor> source = model->StateDict();
  for (size_t i = 0; i < replicas.size(); ++i) {
    EXPECT_FALSE(replicas[i]->is_training());
    const std::vector<NamedTensor> copy = replicas[i]->StateDict();
    ASSERT_EQ(copy.size(), source.size());
    for (size_t k = 0; k < copy.size(); ++k) {
      EXPECT_EQ(copy[k].first, source[k].first);
      EXPECT_EQ(copy[k].second.device(), devices[i]);
      EXPECT_FALSE(copy[k].second.SharesStorageWith(source[k].second));
      EXPECT_EQ(0, std::memcmp(copy[k].second.raw_data(), source[k].second.raw_data(), source[k].second.nbytes()));
    }
  }
}

TEST(Replicate, CopyStateToRefreshes) {
  std::unique_ptr<Sequential> model = MakeModel();
  std::unique_ptr<Module> replica = std::move((*Replicate(*model, {Device::Cpu(1)}))[0]);
  for (const NamedTensor& e : model->StateDict()) {
    if (e.second.dtype() == DType::kF32) {
      for (int64_t i = 0; i < e.second.numel(); ++i) e.second.data<float>()[i] += 1.5f;
    }
  }
  model->Eval();
  ASSERT_TRUE(CopyStateTo(*model, *replica).ok());
  EXPECT_FALSE(replica->is_training());
  const std::vector<NamedTensor> a = model->StateDict(), b = replica->StateDict();
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(0, std::memcmp(a[k].second.raw_data(), b[k].second.raw_data(), a[k].second.nbytes())) << a[k].first;
  }
}

TEST(Replicate, CopyStateToRejectsAnotherModel) {
  std::unique_ptr<Sequential> model = MakeModel();
  Mt19937 gen(1);
  MlpOptions o;
  o.sizes = {6, 5};
  o.flatten = false;
  std::unique_ptr<Sequential> other = *MakeMlp(o, gen);
  std::vector<float> before = *other->StateDict()[0].second.ToVector<float>();
  absl::Status s = CopyStateTo(*model, *other);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("CopyStateTo: the replica"), absl::string_view::npos) << s;
  EXPECT_EQ(*other->StateDict()[0].second.ToVector<float>(), before);  // nothing written
}

}  // namespace
}  // namespace lockstep
