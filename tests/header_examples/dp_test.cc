// The usage examples of dp's public headers, compiled and run on CPU devices
// (cpu:0, cpu:1, ...: one worker thread each). Each example's lines appear
// below exactly as in its header (checked by //tests:header_examples_check);
// lines in between set up its inputs or check its results.
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device.h"
#include "core/mt19937.h"
#include "core/status.h"
#include "core/tensor.h"
#include "dp/data_parallel.h"
#include "dp/parallel_apply.h"
#include "dp/replicate.h"
#include "dp/scatter_gather.h"
#include "gtest/gtest.h"
#include "nn/cross_entropy.h"
#include "nn/mlp.h"
#include "nn/module.h"
#include "nn/sequential.h"
#include "nn/sgd.h"

namespace lockstep {
namespace {

std::vector<float> Values(const Tensor& t) { return *t.ToVector<float>(); }

std::unique_ptr<Sequential> SmallMlp(uint64_t seed) {
  Mt19937 gen(seed);
  MlpOptions options;
  options.sizes = {784, 16, 10};
  return *MakeMlp(options, gen);
}

Tensor Images(int64_t n) {
  Mt19937 noise(11);
  std::vector<float> pixels(static_cast<size_t>(n) * 784);
  for (float& p : pixels) p = static_cast<float>(noise.Next32() % 256) / 255.0f;
  return *Tensor::FromVector<float>(pixels, {n, 784});
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, float tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tolerance) << i;
}

// dp/scatter_gather.h
absl::StatusOr<std::vector<Tensor>> ScatterGatherExample(const Tensor& batch, Tensor* gathered) {
  std::vector<Device> devices = {Device::Cpu(0), Device::Cpu(1), Device::Cpu(2)};
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<Tensor> chunks, Scatter(batch, devices));
  // batch [5, 784] -> chunks [2, 784] on cpu:0, [2, 784] on cpu:1, [1, 784] on cpu:2
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor whole, Gather(chunks, Device::Cpu(0)));
  *gathered = whole;
  return chunks;
}

TEST(DpExamplesTest, ScatterSplitsAndGatherJoins) {
  const Tensor batch = Images(5);
  Tensor whole;
  absl::StatusOr<std::vector<Tensor>> chunks = ScatterGatherExample(batch, &whole);
  ASSERT_TRUE(chunks.ok()) << chunks.status();
  ASSERT_EQ(chunks->size(), 3u);
  const std::vector<Shape> shapes = {{2, 784}, {2, 784}, {1, 784}};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((*chunks)[i].shape(), shapes[i]) << i;
    EXPECT_EQ((*chunks)[i].device(), Device::Cpu(i)) << i;
  }
  EXPECT_EQ(whole.shape(), batch.shape());
  EXPECT_EQ(whole.device(), Device::Cpu(0));
  EXPECT_EQ(Values(whole), Values(batch));
}

// dp/replicate.h
absl::StatusOr<std::vector<std::unique_ptr<Module>>> ReplicateExample(Sequential* model) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Module>> replicas,
                            Replicate(*model, {Device::Cpu(0), Device::Cpu(1)}));
  LOCKSTEP_RETURN_IF_ERROR(model->Parameters()[0]->value.SetZero());  // ... optimizer step on *model ...
  for (auto& r : replicas) LOCKSTEP_RETURN_IF_ERROR(CopyStateTo(*model, *r));
  return replicas;
}

TEST(DpExamplesTest, ReplicasFollowTheModel) {
  std::unique_ptr<Sequential> model = SmallMlp(1);
  absl::StatusOr<std::vector<std::unique_ptr<Module>>> replicas = ReplicateExample(model.get());
  ASSERT_TRUE(replicas.ok()) << replicas.status();
  ASSERT_EQ(replicas->size(), 2u);
  const std::vector<NamedTensor> want = model->StateDict();
  for (int i = 0; i < 2; ++i) {
    const std::vector<NamedTensor> got = (*replicas)[i]->StateDict();
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) {
      EXPECT_EQ(got[k].first, want[k].first);
      EXPECT_EQ(got[k].second.device(), Device::Cpu(i));
      EXPECT_FALSE(got[k].second.SharesStorageWith(want[k].second));
      EXPECT_EQ(Values(got[k].second), Values(want[k].second)) << i << " " << want[k].first;  // the zeroed weight too
    }
  }
}

// dp/parallel_apply.h
absl::StatusOr<std::vector<Tensor>> ParallelApplyExample(absl::Span<Module* const> replica_pointers,
                                                         const std::vector<Tensor>& chunks) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<DeviceWorkers> workers,
                            DeviceWorkers::Create({Device::Cpu(0), Device::Cpu(1)}));
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<Tensor> outputs,
                            ParallelApply(*workers, replica_pointers, chunks));
  std::vector<Tensor> output_grads;  // ...
  for (const Tensor& out : outputs) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor g, Tensor::Zeros(out.shape(), DType::kF32, out.device()));
    output_grads.push_back(g);
  }
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<Tensor> input_grads,
                            ParallelBackward(*workers, replica_pointers, output_grads, false));
  if (input_grads.size() != outputs.size()) return absl::InternalError("one input gradient per replica");
  return outputs;
}

TEST(DpExamplesTest, ParallelApplyRunsEachReplicaOnItsInput) {
  std::unique_ptr<Sequential> model = SmallMlp(2);
  std::vector<std::unique_ptr<Module>> replicas = *Replicate(*model, {Device::Cpu(0), Device::Cpu(1)});
  const std::vector<Module*> replica_pointers = {replicas[0].get(), replicas[1].get()};
  const Tensor batch = Images(6);
  const std::vector<Tensor> chunks = *Scatter(batch, {Device::Cpu(0), Device::Cpu(1)});
  absl::StatusOr<std::vector<Tensor>> outputs = ParallelApplyExample(replica_pointers, chunks);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  ASSERT_EQ(outputs->size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ((*outputs)[i].device(), Device::Cpu(i));
    ExpectNear(Values((*outputs)[i]), Values(*model->Forward(*chunks[i].To(Device::Cpu(0)))), 1e-6f);
  }
}

// dp/data_parallel.h
absl::Status DataParallelExample(Sequential* model, const Tensor& images, const Tensor& labels, int steps) {
  SgdOptions sgd;
  sgd.lr = 0.1;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> optimizer, Sgd::Create(model->NamedParameters(), sgd));
  DataParallelOptions options;
  options.device_ids = {Device::Cpu(0), Device::Cpu(1)};
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<DataParallel> dp, DataParallel::Create(*model, options));
  for (int step = 0; step < steps; ++step) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, dp->Forward(images));  // on cpu:0
    LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult loss, CrossEntropy(logits, labels));
    LOCKSTEP_RETURN_IF_ERROR(dp->Backward(loss.grad_logits).status());  // model's grads = sum
    LOCKSTEP_RETURN_IF_ERROR(optimizer->Step());
    LOCKSTEP_RETURN_IF_ERROR(model->ZeroGrad());
  }
  return absl::OkStatus();
}

TEST(DpExamplesTest, DataParallelTrainsAsOneModule) {
  std::unique_ptr<Sequential> model = SmallMlp(3), reference = SmallMlp(3);
  const Tensor images = Images(8);
  const Tensor labels = *Tensor::FromVector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7});
  const absl::Status s = DataParallelExample(model.get(), images, labels, 2);
  ASSERT_TRUE(s.ok()) << s;
  // The same two steps on the whole batch in one module.
  std::unique_ptr<Sgd> sgd = *Sgd::Create(reference->NamedParameters(), SgdOptions{0.1});
  for (int step = 0; step < 2; ++step) {
    CrossEntropyResult loss = *CrossEntropy(*reference->Forward(images), labels);
    ASSERT_TRUE(reference->Backward(loss.grad_logits).ok());
    ASSERT_TRUE(sgd->Step().ok());
    ASSERT_TRUE(reference->ZeroGrad().ok());
  }
  const std::vector<NamedTensor> want = reference->StateDict(), got = model->StateDict();
  for (size_t k = 0; k < want.size(); ++k) ExpectNear(Values(got[k].second), Values(want[k].second), 1e-5f);
  EXPECT_NE(Values(got[0].second), Values(SmallMlp(3)->StateDict()[0].second));  // it did train
}

}  // namespace
}  // namespace lockstep
