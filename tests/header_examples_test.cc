// The usage examples at the top of public headers, compiled and run on small
// data. header_examples_check.sh fails unless every line of each listed
// header's example appears here, in order: an example that would not compile
// cannot stay in a header.
#include <memory>
#include <vector>

#include "collectives/testing/group.h"
#include "core/mt19937.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ddp/distributed_data_parallel.h"
#include "gtest/gtest.h"
#include "nn/cross_entropy.h"
#include "nn/mlp.h"
#include "nn/module.h"
#include "nn/sequential.h"
#include "nn/sgd.h"

namespace lockstep {
namespace {

// A batch of 4 images [4, 1, 28, 28] and their labels.
struct Batch {
  Tensor images, labels;
};

Batch MakeBatch() {
  Mt19937 noise(7);
  std::vector<float> pixels(4 * 784);
  for (float& p : pixels) p = static_cast<float>(noise.Next32() % 256) / 255.0f;
  return {*Tensor::FromVector<float>(pixels, {4, 1, 28, 28}), *Tensor::FromVector<int64_t>({3, 1, 4, 1})};
}

// nn/mlp.h
absl::StatusOr<std::unique_ptr<Sequential>> MlpExample() {
  Mt19937 gen(0);
  MlpOptions options;
  options.sizes = {784, 512, 256, 10};
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> mlp, MakeMlp(options, gen));
  return mlp;
}

// nn/module.h
absl::Status ModuleExample(const Tensor& images, const Tensor& labels, std::vector<size_t>& ready) {
  Mt19937 gen(0);
  auto MarkReady = [&](size_t index) {
    ready.push_back(index);
    return absl::OkStatus();
  };
  MlpOptions mlp;
  mlp.sizes = {784, 512, 10};
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> model, MakeMlp(mlp, gen));
  model->SetGradReadyHook([&](const GradReadyEvent& e) { return MarkReady(e.index); });
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> optimizer, Sgd::Create(model->NamedParameters(), {}));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, model->Forward(images));
  LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult loss, CrossEntropy(logits, labels));
  LOCKSTEP_RETURN_IF_ERROR(model->Backward(loss.grad_logits).status());
  LOCKSTEP_RETURN_IF_ERROR(optimizer->Step());
  LOCKSTEP_RETURN_IF_ERROR(model->ZeroGrad());
  return absl::OkStatus();
}

// ddp/distributed_data_parallel.h
absl::Status DdpExample(Communicator* comm, const Tensor& images, const Tensor& labels, int steps) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> model, MlpExample());
  SgdOptions sgd;
  sgd.lr = 0.1;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> optimizer, Sgd::Create(model->NamedParameters(), sgd));
  DdpOptions options;                       // PyTorch's names and defaults
  LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*model, *comm, options));
  for (int step = 0; step < steps; ++step) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, ddp->Forward(images));
    LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult loss, CrossEntropy(logits, labels));
    LOCKSTEP_RETURN_IF_ERROR(ddp->Backward(loss.grad_logits));  // grads now averaged
    LOCKSTEP_RETURN_IF_ERROR(optimizer->Step());
    LOCKSTEP_RETURN_IF_ERROR(model->ZeroGrad());
  }
  return absl::OkStatus();
}

TEST(HeaderExamplesTest, MlpBuildsTheReferenceModel) {
  absl::StatusOr<std::unique_ptr<Sequential>> mlp = MlpExample();
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  EXPECT_EQ((*mlp)->NamedParameters().size(), 6u);
}

TEST(HeaderExamplesTest, ModuleStepFiresEveryGradReadyHook) {
  const Batch b = MakeBatch();
  std::vector<size_t> ready;
  const absl::Status s = ModuleExample(b.images, b.labels, ready);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(ready.size(), 4u);  // two Linear layers: weight and bias each
}

TEST(HeaderExamplesTest, DdpStepsOnTwoRanks) {
  const Batch b = MakeBatch();
  const std::vector<absl::Status> results =
      testing::RunThreads(2, [&](Communicator& comm) { return DdpExample(&comm, b.images, b.labels, 2); });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace lockstep
