// The reference trainers' models against their Python twins
// (interop/torch/models/reference_models.py, run here with Debian's
// python3-torch): from the same parameters and input, one training step's
// logits, loss, gradients and BatchNorm buffers are bitwise equal (the same
// libtorch kernels in the same order on both sides), and the default
// configurations have the same parameter names and counts.
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/deadline.h"
#include "core/subprocess.h"
#include "gtest/gtest.h"
#include "interop/torch/bridge/tensor_bridge.h"
#include "interop/torch/models/char_transformer.h"
#include "interop/torch/models/resnet18.h"
#include "nn/checkpoint/safetensors.h"

namespace lockstep {
namespace interop {
namespace {

std::string Runfile(const std::string& path) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"), "/", path);
}

class ReferenceModelsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string out = absl::StrCat(std::getenv("TEST_TMPDIR"), "/reference_models.safetensors");
    SubprocessOptions options;
    options.argv = {"/usr/bin/python3", Runfile("interop/torch/models/reference_models.py"), out};
    options.env = {{"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}};
    absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
    ASSERT_TRUE(child.ok()) << child.status();
    absl::StatusOr<ExitStatus> status = child->Wait(DeadlineIn(std::chrono::seconds(120)));
    ASSERT_TRUE(status.ok() && status->success()) << "reference_models.py did not finish (its output is above)";
    absl::StatusOr<SafetensorsFile> file = ReadSafetensorsFile(out);
    ASSERT_TRUE(file.ok()) << file.status();
    for (auto& [name, t] : file->tensors) {
      absl::StatusOr<at::Tensor> torch_tensor = ToTorch(t);
      ASSERT_TRUE(torch_tensor.ok()) << torch_tensor.status();
      (*python_)[name] = torch_tensor->clone();
    }
    *metadata_ = file->metadata;
  }

  static const at::Tensor& Python(const std::string& name) {
    auto it = python_->find(name);
    if (it == python_->end()) {
      ADD_FAILURE() << "reference_models.py wrote no " << name;
      static const at::Tensor none;
      return none;
    }
    return it->second;
  }

  // Loads the Python twin's parameters and buffers into `model`.
  static void Load(torch::nn::Module& model, const std::string& prefix) {
    torch::NoGradGuard no_grad;
    for (auto& p : model.named_parameters()) p.value().copy_(Python(prefix + "/" + p.key()));
    for (auto& b : model.named_buffers()) b.value().copy_(Python(prefix + "/" + b.key()));
  }

  static void ExpectSame(const std::string& what, const at::Tensor& got, const std::string& name) {
    const at::Tensor& want = Python(name);
    ASSERT_TRUE(want.defined()) << what;
    ASSERT_EQ(got.sizes(), want.sizes()) << what;
    EXPECT_TRUE(torch::equal(got, want))
        << what << ": largest difference "
        << (got.to(torch::kDouble) - want.to(torch::kDouble)).abs().max().item<double>();
  }

  // One training step of `model` on the twin's input; everything compared.
  static void Step(torch::nn::Module& model, const std::string& prefix,
                   const std::function<torch::Tensor(const torch::Tensor&)>& forward) {
    Load(model, prefix);
    model.train();
    const torch::Tensor logits = forward(Python(prefix + "/input"));
    ExpectSame("logits", logits, prefix + "/logits");
    const torch::Tensor loss = torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                                                    Python(prefix + "/target").reshape({-1}));
    ExpectSame("loss", loss.reshape({1}), prefix + "/loss");
    loss.backward();
    for (auto& p : model.named_parameters())
      ExpectSame("grad of " + p.key(), p.value().grad(), prefix + "/grad/" + p.key());
    for (auto& b : model.named_buffers()) ExpectSame("buffer " + b.key(), b.value(), prefix + "/after/" + b.key());
  }

  static void ExpectDefaultShape(torch::nn::Module& model, const std::string& prefix) {
    int64_t count = 0;
    std::vector<std::string> names;
    for (auto& p : model.named_parameters()) {
      count += p.value().numel();
      names.push_back(p.key());
    }
    EXPECT_EQ(absl::StrCat(count), metadata_->at(prefix + "/parameters"));
    EXPECT_EQ(absl::StrJoin(names, ","), metadata_->at(prefix + "/names"));
  }

  static std::map<std::string, at::Tensor>* python_;
  static std::map<std::string, std::string>* metadata_;
};

std::map<std::string, at::Tensor>* ReferenceModelsTest::python_ = new std::map<std::string, at::Tensor>;
std::map<std::string, std::string>* ReferenceModelsTest::metadata_ = new std::map<std::string, std::string>;

TEST_F(ReferenceModelsTest, ResNet18StepMatchesPythonBitForBit) {
  ResNet18Options options;
  options.width = 8;  // reference_models.py's SMALL
  ResNet18 model(options);
  Step(*model, "resnet18", [&](const torch::Tensor& x) { return model->forward(x); });
}

TEST_F(ReferenceModelsTest, CharTransformerStepMatchesPythonBitForBit) {
  CharTransformerOptions options;
  options.vocab_size = 11;
  options.context = 16;
  options.layers = 2;
  options.dim = 32;
  options.heads = 4;
  CharTransformer model(options);
  Step(*model, "char_transformer", [&](const torch::Tensor& x) { return model->forward(x); });
}

TEST_F(ReferenceModelsTest, DefaultConfigurationsHaveTheTwinsNamesAndCounts) {
  ResNet18 resnet;  // 1 channel, 10 classes, width 64: 11,175,370 parameters
  ExpectDefaultShape(*resnet, "resnet18");
  CharTransformer transformer;  // 6 x 384, 6 heads, context 128, 114 bytes: 10,784,370
  ExpectDefaultShape(*transformer, "char_transformer");
  EXPECT_EQ(resnet->forward(torch::zeros({2, 1, 28, 28})).sizes(), (std::vector<int64_t>{2, 10}));
  EXPECT_EQ(transformer->forward(torch::zeros({2, 128}, torch::kLong)).sizes(), (std::vector<int64_t>{2, 128, 114}));
  EXPECT_THROW(transformer->forward(torch::zeros({1, 129}, torch::kLong)), c10::Error);
}

}  // namespace
}  // namespace interop
}  // namespace lockstep
