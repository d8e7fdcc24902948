// The usage examples of nn's public headers, compiled and run. Each example's
// lines appear below exactly as in its header (checked by
// //tests:header_examples_check); lines in between set up its inputs or check
// its results.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "amp/grad_scaler.h"
#include "core/mt19937.h"
#include "core/status.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "core/atomic_file.h"
#include "nn/batch_norm.h"
#include "nn/blas_kernels.h"
#include "nn/checkpoint/checkpoint.h"
#include "nn/clip_grad.h"
#include "nn/conv2d.h"
#include "nn/cross_entropy.h"
#include "nn/dropout.h"
#include "nn/flatten.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/math.h"
#include "nn/mlp.h"
#include "nn/module.h"
#include "nn/optimizer.h"
#include "nn/relu.h"
#include "nn/checkpoint/safetensors.h"
#include "nn/sequential.h"
#include "nn/sgd.h"
#include "nn/checkpoint/state_dict_prefix.h"

namespace lockstep {

// nn/blas_kernels.h: a program's main; here a function of that name (outside
// the global namespace it is an ordinary function).
namespace blas_kernels_example {
int main(int argc, char** argv) {
  lockstep::RestartWithFasterBlasKernelsIfNeeded(argv);  // may not return
  // ... (the program)
  return 0;
}
}  // namespace blas_kernels_example

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

std::vector<float> Values(const Tensor& t) { return *t.ToVector<float>(); }

// nn/mlp.h
absl::StatusOr<std::unique_ptr<Sequential>> MlpExample() {
  Mt19937 gen(0);
  MlpOptions options;
  options.sizes = {784, 512, 256, 10};
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> mlp, MakeMlp(options, gen));
  return mlp;
}

TEST(NnExamplesTest, MlpBuildsTheReferenceModel) {
  absl::StatusOr<std::unique_ptr<Sequential>> mlp = MlpExample();
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  std::vector<NamedParameter> params = (*mlp)->NamedParameters();
  ASSERT_EQ(params.size(), 6u);
  EXPECT_EQ(params[0].name, "1.weight");  // after the leading Flatten
  EXPECT_EQ(params[0].parameter->value.shape(), (Shape{512, 784}));
  EXPECT_EQ(params[5].parameter->value.shape(), (Shape{10}));
  absl::StatusOr<Tensor> logits = (*mlp)->Forward(MakeBatch().images);
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_EQ(logits->shape(), (Shape{4, 10}));
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

// nn/clip_grad.h, after a scaled backward.
absl::StatusOr<double> ClipGradExample(const Tensor& images, const Tensor& labels) {
  Mt19937 gen(0);
  MlpOptions mlp;
  mlp.sizes = {784, 16, 10};
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> model, MakeMlp(mlp, gen));
  LOCKSTEP_ASSIGN_OR_RETURN(GradScaler scaler, GradScaler::Create({}));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, model->Forward(images));
  LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult loss, CrossEntropy(logits, labels));
  LOCKSTEP_RETURN_IF_ERROR(scaler.Scale(loss.grad_logits));
  LOCKSTEP_RETURN_IF_ERROR(model->Backward(loss.grad_logits).status());
  std::vector<Tensor> grads;
  for (Parameter* p : model->Parameters()) grads.push_back(p->grad);
  LOCKSTEP_RETURN_IF_ERROR(scaler.Unscale(grads));
  LOCKSTEP_ASSIGN_OR_RETURN(double norm, ClipGradNorm(model->Parameters(), /*max_norm=*/1.0));
  LOCKSTEP_RETURN_IF_ERROR(ClipGradValue(model->Parameters(), /*clip_value=*/0.5));
  LOCKSTEP_ASSIGN_OR_RETURN(double after, ClipGradNorm(model->Parameters(), 1e9));
  if (!(after <= 1.0 + 1e-6)) return absl::InternalError(absl::StrCat("norm after clipping ", after));
  return norm;
}

TEST(NnExamplesTest, ClipGradBoundsTheGradientNorm) {
  const Batch b = MakeBatch();
  absl::StatusOr<double> norm = ClipGradExample(b.images, b.labels);
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_GT(*norm, 0.0);
}

TEST(NnExamplesTest, ModuleStepFiresEveryGradReadyHook) {
  const Batch b = MakeBatch();
  std::vector<size_t> ready;
  const absl::Status s = ModuleExample(b.images, b.labels, ready);
  ASSERT_TRUE(s.ok()) << s;
  // Two Linear layers, weight and bias each, ready in backward's order.
  EXPECT_EQ(ready, (std::vector<size_t>{3, 2, 1, 0}));
}

// core/atomic_file.h. The example writes /ckpt, so it is compiled, not run;
// AtomicFileInDir runs the same two calls on a path in the test's directory.
absl::StatusOr<std::string> AtomicFileExample(absl::string_view bytes) {
  LOCKSTEP_RETURN_IF_ERROR(WriteFileAtomically("/ckpt/model.safetensors", bytes));
  LOCKSTEP_ASSIGN_OR_RETURN(std::string back,
                            ReadFileToString("/ckpt/model.safetensors", /*max_bytes=*/1 << 30));
  return back;
}

absl::StatusOr<std::string> AtomicFileInDir(const std::string& path, absl::string_view bytes) {
  LOCKSTEP_RETURN_IF_ERROR(WriteFileAtomically(path, bytes));
  LOCKSTEP_ASSIGN_OR_RETURN(std::string back, ReadFileToString(path, /*max_bytes=*/1 << 30));
  return back;
}

TEST(NnExamplesTest, AtomicFileWritesAndReadsBack) {
  (void)&AtomicFileExample;
  const std::string path = ::testing::TempDir() + "/model.safetensors";
  absl::StatusOr<std::string> back = AtomicFileInDir(path, "first");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, "first");
  back = AtomicFileInDir(path, std::string(1000, 'x'));  // replaces the file
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, std::string(1000, 'x'));
  EXPECT_FALSE(ReadFileToString(path, /*max_bytes=*/10).ok());  // over the limit
}

// nn/batch_norm.h
absl::StatusOr<std::unique_ptr<BatchNorm2d>> BatchNormExample() {
  BatchNormOptions options;
  options.num_features = 16;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<BatchNorm2d> bn, BatchNorm2d::Create(options));
  return bn;
}

TEST(NnExamplesTest, BatchNormNormalizesPerChannel) {
  absl::StatusOr<std::unique_ptr<BatchNorm2d>> bn = BatchNormExample();
  ASSERT_TRUE(bn.ok()) << bn.status();
  // [2, 16, 2, 2]: channel c holds c + {0, 1, 2, 3, 4, 5, 6, 7} (mean c + 3.5).
  std::vector<float> x(2 * 16 * 4);
  for (int n = 0; n < 2; ++n) {
    for (int c = 0; c < 16; ++c) {
      for (int i = 0; i < 4; ++i) x[(n * 16 + c) * 4 + i] = static_cast<float>(c + n * 4 + i);
    }
  }
  absl::StatusOr<Tensor> y = (*bn)->Forward(*Tensor::FromVector<float>(x, {2, 16, 2, 2}));
  ASSERT_TRUE(y.ok()) << y.status();
  const std::vector<float> out = Values(*y);
  for (int c = 0; c < 16; ++c) {
    double sum = 0, sq = 0;
    for (int n = 0; n < 2; ++n) {
      for (int i = 0; i < 4; ++i) {
        const double v = out[(n * 16 + c) * 4 + i];
        sum += v;
        sq += v * v;
      }
    }
    EXPECT_NEAR(sum / 8, 0.0, 1e-5) << c;
    EXPECT_NEAR(sq / 8, 1.0, 1e-4) << c;  // biased variance, eps 1e-5
  }
  const std::vector<float> running_mean = Values((*bn)->running_mean());
  EXPECT_NEAR(running_mean[2], 0.1 * 5.5, 1e-6);  // momentum 0.1
}

// nn/blas_kernels.h: the program restarts itself (with OPENBLAS_CORETYPE)
// only where OpenBLAS does not know the CPU; then this test binary runs
// again, and there the call returns at once.
TEST(NnExamplesTest, BlasKernelsRestartLeavesNothingBetterToDo) {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  std::stringstream split(cmdline);
  for (std::string arg; std::getline(split, arg, '\0');) args.push_back(arg);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  ASSERT_EQ(blas_kernels_example::main(static_cast<int>(args.size()), argv.data()), 0);
  EXPECT_EQ(BetterBlasCoreType(), "") << "running with " << BlasCoreName();
  EXPECT_NE(BlasCoreName(), "");
}

// nn/checkpoint/checkpoint.h. The example writes /ckpt, so it is compiled, not run;
// CheckpointInDir runs the same calls on a path in the test's directory.
absl::Status CheckpointExample(Module* model, const std::unique_ptr<Sgd>& optimizer, GradScaler& scaler) {
  TrainingProgress progress;
  progress.epoch = 3;
  progress.step = 1400;
  LOCKSTEP_RETURN_IF_ERROR(SaveCheckpoint("/ckpt/last.safetensors", *model, optimizer.get(),
                                          progress, scaler.StateToMetadata("scaler.")));
  // ...
  LOCKSTEP_ASSIGN_OR_RETURN(LoadedCheckpoint loaded,
                            LoadCheckpoint("/ckpt/last.safetensors", *model, optimizer.get()));
  LOCKSTEP_RETURN_IF_ERROR(scaler.LoadStateFromMetadata(loaded.metadata, "scaler."));
  return absl::OkStatus();
}

absl::StatusOr<LoadedCheckpoint> CheckpointInDir(const std::string& path, Module* model, Module* fresh,
                                                 const std::unique_ptr<Sgd>& optimizer,
                                                 const std::unique_ptr<Sgd>& fresh_optimizer, GradScaler& scaler,
                                                 GradScaler& fresh_scaler) {
  TrainingProgress progress;
  progress.epoch = 3;
  progress.step = 1400;
  LOCKSTEP_RETURN_IF_ERROR(
      SaveCheckpoint(path, *model, optimizer.get(), progress, scaler.StateToMetadata("scaler.")));
  LOCKSTEP_ASSIGN_OR_RETURN(LoadedCheckpoint loaded, LoadCheckpoint(path, *fresh, fresh_optimizer.get()));
  LOCKSTEP_RETURN_IF_ERROR(fresh_scaler.LoadStateFromMetadata(loaded.metadata, "scaler."));
  return loaded;
}

TEST(NnExamplesTest, CheckpointRestoresModelOptimizerAndScaler) {
  (void)&CheckpointExample;
  Mt19937 gen(1), other_gen(2);
  MlpOptions mlp;
  mlp.sizes = {784, 8, 10};
  std::unique_ptr<Sequential> model = *MakeMlp(mlp, gen);
  std::unique_ptr<Sequential> fresh = *MakeMlp(mlp, other_gen);
  SgdOptions sgd;
  sgd.lr = 0.1;
  sgd.momentum = 0.9;
  std::unique_ptr<Sgd> optimizer = *Sgd::Create(model->NamedParameters(), sgd);
  std::unique_ptr<Sgd> fresh_optimizer = *Sgd::Create(fresh->NamedParameters(), sgd);
  // One step, so that the optimizer has momentum buffers.
  const Batch b = MakeBatch();
  CrossEntropyResult loss = *CrossEntropy(*model->Forward(b.images), b.labels);
  ASSERT_TRUE(model->Backward(loss.grad_logits).ok());
  ASSERT_TRUE(optimizer->Step().ok());
  GradScalerOptions scaler_options;
  scaler_options.init_scale = 1024;
  GradScaler scaler = *GradScaler::Create(scaler_options);
  GradScaler fresh_scaler = *GradScaler::Create({});

  absl::StatusOr<LoadedCheckpoint> loaded = CheckpointInDir(::testing::TempDir() + "/last.safetensors", model.get(),
                                                            fresh.get(), optimizer, fresh_optimizer, scaler,
                                                            fresh_scaler);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->progress.epoch, 3);
  EXPECT_EQ(loaded->progress.step, 1400);
  EXPECT_EQ(fresh_scaler.scale(), 1024.0f);
  std::vector<NamedTensor> want = model->StateDict(), got = fresh->StateDict();
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(Values(want[i].second), Values(got[i].second)) << want[i].first;
  std::vector<NamedTensor> want_state = optimizer->StateTensors(), got_state = fresh_optimizer->StateTensors();
  ASSERT_EQ(want_state.size(), got_state.size());
  ASSERT_FALSE(want_state.empty());
  for (size_t i = 0; i < want_state.size(); ++i) {
    EXPECT_EQ(want_state[i].first, got_state[i].first);
    EXPECT_EQ(Values(want_state[i].second), Values(got_state[i].second)) << want_state[i].first;
  }
}

// nn/conv2d.h
absl::StatusOr<std::unique_ptr<Conv2d>> Conv2dExample() {
  Mt19937 gen(0);
  Conv2dOptions options;
  options.in_channels = 1;
  options.out_channels = 8;
  options.kernel_h = options.kernel_w = 3;
  options.pad_h = options.pad_w = 1;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Conv2d> conv, Conv2d::Create(options, gen));
  return conv;
}

TEST(NnExamplesTest, Conv2dIsInitializedAsPyTorch) {
  absl::StatusOr<std::unique_ptr<Conv2d>> conv = Conv2dExample();
  ASSERT_TRUE(conv.ok()) << conv.status();
  EXPECT_EQ((*conv)->weight().value.shape(), (Shape{8, 1, 3, 3}));
  // torch.manual_seed(0); torch.nn.Conv2d(1, 8, 3, padding=1), PyTorch 1.13.
  const std::vector<float> w = Values((*conv)->weight().value), bias = Values((*conv)->bias().value);
  EXPECT_FLOAT_EQ(w[0], -0.0024956068955361843f);
  EXPECT_FLOAT_EQ(w[1], 0.17881453037261963f);
  EXPECT_FLOAT_EQ(w[2], -0.2743483781814575f);
  EXPECT_FLOAT_EQ(bias[0], 0.13100330531597137f);
  EXPECT_FLOAT_EQ(bias[1], 0.2761831283569336f);
  absl::StatusOr<Tensor> y = (*conv)->Forward(*Tensor::Zeros({2, 1, 5, 5}, DType::kF32));
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (Shape{2, 8, 5, 5}));  // padding 1 keeps 5 x 5
  EXPECT_FLOAT_EQ(Values(*y)[25], bias[1]);   // zero input: the bias
}

// nn/cross_entropy.h
absl::StatusOr<CrossEntropyResult> CrossEntropyExample(Linear* model, const Tensor& x, const Tensor& labels) {
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, model->Forward(x));
  LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, labels));
  // ce.loss: the mean loss; ce.grad_logits: d loss / d logits (f32)
  LOCKSTEP_RETURN_IF_ERROR(model->Backward(ce.grad_logits).status());
  return ce;
}

TEST(NnExamplesTest, CrossEntropyLossAndGradient) {
  LinearOptions options;
  options.in_features = 3;
  options.out_features = 4;
  std::unique_ptr<Linear> model = *Linear::Create(options);  // zero weights: uniform logits
  const Tensor x = *Tensor::FromVector<float>({1, 2, 3, -1, 0, 1}, {2, 3});
  const Tensor labels = *Tensor::FromVector<int64_t>({2, 0});
  absl::StatusOr<CrossEntropyResult> ce = CrossEntropyExample(model.get(), x, labels);
  ASSERT_TRUE(ce.ok()) << ce.status();
  EXPECT_NEAR(ce->loss, std::log(4.0), 1e-6);
  // d loss / d logits = (softmax - onehot) / batch = (0.25 - [label]) / 2.
  const std::vector<float> g = Values(ce->grad_logits);
  EXPECT_FLOAT_EQ(g[2], (0.25f - 1.0f) / 2);
  EXPECT_FLOAT_EQ(g[0], 0.25f / 2);
  // The bias gradient is the column sum of grad_logits.
  const std::vector<float> bias_grad = Values(model->bias().grad);
  EXPECT_FLOAT_EQ(bias_grad[0], 0.25f / 2 + (0.25f - 1.0f) / 2);
}

// nn/dropout.h
TEST(NnExamplesTest, DropoutZeroesAndScales) {
  auto drop = std::make_unique<Dropout>(/*p=*/0.2, /*seed=*/1234);

  EXPECT_EQ(drop->p(), 0.2);
  const Tensor x = *Tensor::FromVector<float>(std::vector<float>(1000, 1.0f));
  absl::StatusOr<Tensor> y = drop->Forward(x);
  ASSERT_TRUE(y.ok()) << y.status();
  int zeros = 0;
  for (float v : Values(*y)) {
    if (v == 0.0f) {
      ++zeros;
    } else {
      EXPECT_FLOAT_EQ(v, 1.0f / 0.8f);
    }
  }
  EXPECT_GT(zeros, 140);
  EXPECT_LT(zeros, 260);
  drop->Eval();
  EXPECT_EQ(Values(*drop->Forward(x)), Values(x));  // the identity in eval mode
}

// nn/init.h
absl::StatusOr<double> InitExample(const Tensor& w, int64_t fan_in) {
  Mt19937 gen(0);                                   // torch.manual_seed(0)
  LOCKSTEP_RETURN_IF_ERROR(UniformFill(w, -0.1, 0.1, gen));   // w.uniform_(-0.1, 0.1)
  const double bound = KaimingUniformBound(fan_in, std::sqrt(5.0));
  return bound;
}

TEST(NnExamplesTest, InitMatchesPyTorch) {
  const Tensor w = *Tensor::Zeros({4}, DType::kF32);
  absl::StatusOr<double> bound = InitExample(w, 784);
  ASSERT_TRUE(bound.ok()) << bound.status();
  // torch.manual_seed(0); torch.empty(4).uniform_(-0.1, 0.1), PyTorch 1.13.
  EXPECT_EQ(Values(w), (std::vector<float>{-0.0007486820104531944f, 0.05364435911178589f, -0.08230451494455338f,
                                           -0.07359390705823898f}));
  EXPECT_NEAR(*bound, 1.0 / 28.0, 1e-12);  // gain sqrt(2 / 6) * sqrt(3 / 784)
}

// nn/linear.h
absl::StatusOr<std::unique_ptr<Linear>> LinearExample() {
  Mt19937 gen(0);  // torch.manual_seed(0)
  LinearOptions options;
  options.in_features = 784;
  options.out_features = 512;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Linear> fc, Linear::Create(options, gen));
  return fc;
}

TEST(NnExamplesTest, LinearIsInitializedAsPyTorch) {
  absl::StatusOr<std::unique_ptr<Linear>> fc = LinearExample();
  ASSERT_TRUE(fc.ok()) << fc.status();
  EXPECT_EQ((*fc)->weight().value.shape(), (Shape{512, 784}));
  EXPECT_EQ((*fc)->bias().value.shape(), (Shape{512}));
  // torch.manual_seed(0); torch.nn.Linear(784, 512), PyTorch 1.13.
  const std::vector<float> w = Values((*fc)->weight().value), b = Values((*fc)->bias().value);
  EXPECT_EQ(w[0], -0.00026738643646240234f);
  EXPECT_EQ(w[1], 0.019158700481057167f);
  EXPECT_EQ(w[2], -0.029394470155239105f);
  EXPECT_EQ(b[0], 0.03204282745718956f);
  EXPECT_EQ(b[1], 0.01420534960925579f);
}

// nn/math.h
absl::Status MathExample(const Tensor& x, const Tensor& w, const Tensor& y) {
  // y[128, 512] = x[128, 784] * w[512, 784]^T
  LOCKSTEP_RETURN_IF_ERROR(Gemm(x, false, w, true, y));
  LOCKSTEP_RETURN_IF_ERROR(Relu(y, y));
  return absl::OkStatus();
}

TEST(NnExamplesTest, MathGemmThenRelu) {
  // Small integers, so that every sum is exact in f32.
  Mt19937 gen(3);
  std::vector<float> xs(128 * 784), ws(512 * 784);
  for (float& v : xs) v = static_cast<float>(static_cast<int>(gen.Next32() % 3) - 1);
  for (float& v : ws) v = static_cast<float>(static_cast<int>(gen.Next32() % 3) - 1);
  const Tensor x = *Tensor::FromVector<float>(xs, {128, 784});
  const Tensor w = *Tensor::FromVector<float>(ws, {512, 784});
  const Tensor y = *Tensor::Zeros({128, 512}, DType::kF32);
  const absl::Status s = MathExample(x, w, y);
  ASSERT_TRUE(s.ok()) << s;
  const std::vector<float> got = Values(y);
  int positive = 0;
  for (int i = 0; i < 128; i += 7) {
    for (int j = 0; j < 512; j += 5) {
      float dot = 0;
      for (int k = 0; k < 784; ++k) dot += xs[i * 784 + k] * ws[j * 784 + k];
      EXPECT_EQ(got[i * 512 + j], std::max(dot, 0.0f)) << i << "," << j;
      positive += dot > 0;
    }
  }
  EXPECT_GT(positive, 0);
}

// nn/optimizer.h
absl::Status OptimizerExample(Module* model, const Tensor& x, const Tensor& labels) {
  SgdOptions options;
  options.lr = 0.1;
  options.momentum = 0.9;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> sgd, Sgd::Create(model->NamedParameters(), options));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, model->Forward(x));
  LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult loss, CrossEntropy(logits, labels));
  LOCKSTEP_RETURN_IF_ERROR(model->Backward(loss.grad_logits).status());  // ... backward ...
  LOCKSTEP_RETURN_IF_ERROR(sgd->Step());
  LOCKSTEP_RETURN_IF_ERROR(sgd->ZeroGrad());
  return absl::OkStatus();
}

TEST(NnExamplesTest, OptimizerStepsAndZeroesGradients) {
  Mt19937 gen(0);
  LinearOptions options;
  options.in_features = 3;
  options.out_features = 2;
  std::unique_ptr<Linear> model = *Linear::Create(options, gen);
  std::unique_ptr<Linear> reference = *Linear::Create(options);
  ASSERT_TRUE(reference->LoadStateDict(model->StateDict()).ok());
  const Tensor x = *Tensor::FromVector<float>({1, 2, 3}, {1, 3});
  const Tensor labels = *Tensor::FromVector<int64_t>({1});
  const absl::Status s = OptimizerExample(model.get(), x, labels);
  ASSERT_TRUE(s.ok()) << s;
  // The first step with momentum: the buffer is the gradient, p -= lr * grad.
  CrossEntropyResult loss = *CrossEntropy(*reference->Forward(x), labels);
  ASSERT_TRUE(reference->Backward(loss.grad_logits).ok());
  const std::vector<float> before = Values(reference->weight().value), grad = Values(reference->weight().grad);
  const std::vector<float> after = Values(model->weight().value);
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_FLOAT_EQ(after[i], before[i] - 0.1f * grad[i]) << i;
    EXPECT_NE(grad[i], 0.0f) << i;
  }
  for (float g : Values(model->weight().grad)) EXPECT_EQ(g, 0.0f);  // ZeroGrad
}

// nn/checkpoint/safetensors.h. The example writes /ckpt, so it is compiled, not run;
// SafetensorsInDir runs the same calls on a path in the test's directory.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-value"  // the example names fields as statements
absl::Status SafetensorsExample(const Tensor& w, const Tensor& b) {
  std::vector<std::pair<std::string, Tensor>> tensors = {{"fc1.weight", w}, {"fc1.bias", b}};
  LOCKSTEP_RETURN_IF_ERROR(WriteSafetensorsFile("/ckpt/model.safetensors", tensors,
                                                {{"step", "1200"}}));
  LOCKSTEP_ASSIGN_OR_RETURN(SafetensorsFile file,
                            ReadSafetensorsFile("/ckpt/model.safetensors"));
  file.tensors[0].first;     // "fc1.weight"
  file.metadata["step"];     // "1200"
  return absl::OkStatus();
}
#pragma GCC diagnostic pop

absl::StatusOr<SafetensorsFile> SafetensorsInDir(const std::string& path, const Tensor& w, const Tensor& b) {
  std::vector<std::pair<std::string, Tensor>> tensors = {{"fc1.weight", w}, {"fc1.bias", b}};
  LOCKSTEP_RETURN_IF_ERROR(WriteSafetensorsFile(path, tensors, {{"step", "1200"}}));
  LOCKSTEP_ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensorsFile(path));
  return file;
}

TEST(NnExamplesTest, SafetensorsRoundTrip) {
  (void)&SafetensorsExample;
  const Tensor w = *Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = *Tensor::FromVector<float>({-1, 1});
  absl::StatusOr<SafetensorsFile> file = SafetensorsInDir(::testing::TempDir() + "/model.safetensors", w, b);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->tensors.size(), 2u);
  EXPECT_EQ(file->tensors[0].first, "fc1.weight");
  EXPECT_EQ(file->metadata["step"], "1200");
  EXPECT_EQ(file->tensors[0].second.shape(), (Shape{2, 3}));
  EXPECT_EQ(Values(file->tensors[0].second), Values(w));
  EXPECT_EQ(file->tensors[1].first, "fc1.bias");
  EXPECT_EQ(Values(file->tensors[1].second), Values(b));
}

// nn/sequential.h
absl::StatusOr<std::unique_ptr<Sequential>> SequentialExample() {
  Mt19937 gen(0);
  LinearOptions options;
  options.in_features = 4;
  options.out_features = 3;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Linear> fc1, Linear::Create(options, gen));
  auto model = std::make_unique<Sequential>();
  model->Add(std::make_unique<Flatten>());
  model->Add(std::move(fc1));
  model->Add(std::make_unique<ReLU>());
  return model;
}

TEST(NnExamplesTest, SequentialNamesChildrenByPosition) {
  absl::StatusOr<std::unique_ptr<Sequential>> model = SequentialExample();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->size(), 3u);
  std::vector<NamedParameter> params = (*model)->NamedParameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].name, "1.weight");
  EXPECT_EQ(params[1].name, "1.bias");
  absl::StatusOr<Tensor> y = (*model)->Forward(*Tensor::FromVector<float>({1, -2, 3, -4, 5, 6, 7, 8}, {2, 1, 2, 2}));
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (Shape{2, 3}));
  for (float v : Values(*y)) EXPECT_GE(v, 0.0f);  // after the ReLU
}

// nn/checkpoint/state_dict_prefix.h
absl::Status StateDictPrefixExample(Module& model, const std::vector<NamedTensor>& saved) {
  std::vector<NamedTensor> state = saved;           // from a file
  LOCKSTEP_RETURN_IF_ERROR(LoadStateDictAcceptingWrapperPrefix(model, state));
  return absl::OkStatus();
}

TEST(NnExamplesTest, StateDictPrefixLoadsDdpNames) {
  Mt19937 gen(5);
  MlpOptions mlp;
  mlp.sizes = {784, 8, 10};
  std::unique_ptr<Sequential> trained = *MakeMlp(mlp, gen);
  std::unique_ptr<Sequential> model = *MakeMlp(mlp, gen);  // other weights
  std::vector<NamedTensor> ddp_state;  // as torch.save(ddp.state_dict()) names them
  for (NamedTensor& t : trained->StateDict()) ddp_state.push_back({"module." + t.first, t.second});
  const absl::Status s = StateDictPrefixExample(*model, ddp_state);
  ASSERT_TRUE(s.ok()) << s;
  std::vector<NamedTensor> want = trained->StateDict(), got = model->StateDict();
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(Values(want[i].second), Values(got[i].second)) << want[i].first;
  EXPECT_TRUE(StateDictPrefixExample(*model, trained->StateDict()).ok());  // plain names too
}

}  // namespace
}  // namespace lockstep
