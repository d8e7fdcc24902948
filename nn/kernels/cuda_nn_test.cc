// The CUDA path of nn against the CPU path: elementwise kernels and
// optimizer updates bit for bit (shared arithmetic, no contraction on either
// side), cuBLAS GEMMs and a whole MLP training step within tolerance.
// Skips when no CUDA device is visible.
#include <cmath>
#include <memory>
#include <vector>

#include "core/cuda/cuda_runtime.h"
#include "core/kernels.h"
#include "core/mt19937.h"
#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/cross_entropy.h"
#include "nn/math.h"
#include "nn/mlp.h"
#include "nn/sgd.h"

namespace lockstep {
namespace {

class CudaNnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  }
};

Tensor Random(Shape shape, uint64_t seed) {
  Mt19937 gen(seed);
  const int64_t n = *ShapeNumel(shape);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(gen.Next32() % 20001) / 10000.0f - 1.0f;
  return *Tensor::FromVector<float>(v, shape);
}

Tensor OnGpu(const Tensor& t) { return *t.To(Device::Cuda(0)); }
std::vector<float> Host(const Tensor& t) {
  Tensor f = t;
  if (t.dtype() != DType::kF32) {
    f = *Tensor::Empty(t.shape(), DType::kF32, t.device());
    EXPECT_TRUE(Cast(t, f).ok());
  }
  return *f.ToVector<float>();
}

TEST_F(CudaNnTest, GemmMatchesCpuForEveryTranspositionAndDType) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        Tensor a32 = Random(ta ? Shape{33, 17} : Shape{17, 33}, 1);
        Tensor b32 = Random(tb ? Shape{9, 33} : Shape{33, 9}, 2);
        Tensor a = *Tensor::Empty(a32.shape(), dtype), b = *Tensor::Empty(b32.shape(), dtype);
        ASSERT_TRUE(Cast(a32, a).ok() && Cast(b32, b).ok());
        Tensor c = *Tensor::Zeros({17, 9}, dtype);
        Tensor gc = OnGpu(c);
        ASSERT_TRUE(Gemm(a, ta, b, tb, c).ok());
        ASSERT_TRUE(Gemm(OnGpu(a), ta, OnGpu(b), tb, gc).ok());
        std::vector<float> cpu = Host(c), gpu = Host(gc);
        const double tol = dtype == DType::kF32 ? 1e-5 : dtype == DType::kF16 ? 2e-2 : 1e-1;
        for (size_t i = 0; i < cpu.size(); ++i) {
          EXPECT_NEAR(gpu[i], cpu[i], tol) << DTypeName(dtype) << ta << tb << " " << i;
        }
      }
    }
  }
}

TEST_F(CudaNnTest, ElementwiseKernelsAreBitIdentical) {
  Tensor x = Random({1000}, 3);
  Tensor y = *Tensor::Empty({1000}, DType::kF32), gy = OnGpu(y);
  ASSERT_TRUE(Relu(x, y).ok());
  ASSERT_TRUE(Relu(OnGpu(x), gy).ok());
  EXPECT_EQ(Host(gy), Host(y));
  Tensor g = Random({1000}, 4);
  Tensor gi = *Tensor::Empty({1000}, DType::kF32), ggi = OnGpu(gi);
  ASSERT_TRUE(ReluBackward(g, y, gi).ok());
  ASSERT_TRUE(ReluBackward(OnGpu(g), gy, ggi).ok());
  EXPECT_EQ(Host(ggi), Host(gi));
  ASSERT_TRUE(DropoutApply(x, y, 0.7, 99, 5).ok());
  ASSERT_TRUE(DropoutApply(OnGpu(x), gy, 0.7, 99, 5).ok());
  EXPECT_EQ(Host(gy), Host(y));
}

TEST_F(CudaNnTest, WindowKernelsAreBitIdentical) {
  const Window2d w{3, 3, 2, 2, 1, 1};
  Tensor x = Random({2, 3, 9, 7}, 5);
  Tensor image = *(*x.Slice(0, 1)).Reshape({3, 9, 7});
  Shape out = *WindowOutputSize(9, 7, w);
  Tensor col = *Tensor::Empty({27, out[0] * out[1]}, DType::kF32), gcol = OnGpu(col);
  ASSERT_TRUE(Im2Col(image, w, col).ok());
  ASSERT_TRUE(Im2Col(OnGpu(image), w, gcol).ok());
  EXPECT_EQ(Host(gcol), Host(col));
  Tensor back = *Tensor::Empty({3, 9, 7}, DType::kF32), gback = OnGpu(back);
  ASSERT_TRUE(Col2Im(col, w, back).ok());
  ASSERT_TRUE(Col2Im(gcol, w, gback).ok());
  EXPECT_EQ(Host(gback), Host(back));
  Tensor y = *Tensor::Empty({2, 3, out[0], out[1]}, DType::kF32), gy = OnGpu(y);
  Tensor idx = *Tensor::Empty({2, 3, out[0], out[1]}, DType::kI32), gidx = OnGpu(idx);
  ASSERT_TRUE(MaxPool2dForward(x, w, y, idx).ok());
  ASSERT_TRUE(MaxPool2dForward(OnGpu(x), w, gy, gidx).ok());
  EXPECT_EQ(Host(gy), Host(y));
  EXPECT_EQ(*gidx.ToVector<int32_t>(), *idx.ToVector<int32_t>());
  Tensor gx = *Tensor::Empty({2, 3, 9, 7}, DType::kF32), ggx = OnGpu(gx);
  ASSERT_TRUE(MaxPool2dBackward(y, idx, w, gx).ok());
  ASSERT_TRUE(MaxPool2dBackward(gy, gidx, w, ggx).ok());
  EXPECT_EQ(Host(ggx), Host(gx));
}

TEST_F(CudaNnTest, CloneToCudaGivesTheSameForward) {
  Mt19937 gen(3);
  MlpOptions options;
  options.sizes = {20, 16, 4};
  options.flatten = false;
  std::unique_ptr<Sequential> cpu = *MakeMlp(options, gen);
  absl::StatusOr<std::unique_ptr<Module>> gpu = cpu->CloneTo(Device::Cuda(0));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  for (Parameter* p : (*gpu)->Parameters()) EXPECT_TRUE(p->value.device().is_cuda());
  Tensor x = Random({5, 20}, 8);
  std::vector<float> a = Host(*cpu->Forward(x)), b = Host(*(*gpu)->Forward(OnGpu(x)));
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-5) << i;
}

// The same training run on CPU and GPU: SGD and AdamW updates are
// bit-identical given identical gradients, so differences come only from
// GEMM summation order and stay tiny.
TEST_F(CudaNnTest, MlpTrainingMatchesCpu) {
  for (bool adamw : {false, true}) {
    std::unique_ptr<Sequential> models[2];
    std::unique_ptr<Optimizer> optimizers[2];
    for (int d = 0; d < 2; ++d) {
      Mt19937 gen(0);
      MlpOptions options;
      options.sizes = {784, 128, 10};
      options.device = d == 0 ? Device::Cpu() : Device::Cuda(0);
      models[d] = *MakeMlp(options, gen);
      if (adamw) {
        optimizers[d] = *Adam::Create(models[d]->NamedParameters(), AdamWOptions());
      } else {
        SgdOptions sgd;
        sgd.lr = 0.05;
        sgd.momentum = 0.9;
        optimizers[d] = *Sgd::Create(models[d]->NamedParameters(), sgd);
      }
    }
    for (int step = 0; step < 3; ++step) {
      Tensor x = Random({32, 1, 28, 28}, 10 + step);
      std::vector<int64_t> labels(32);
      for (int i = 0; i < 32; ++i) labels[i] = (i * 7 + step) % 10;
      Tensor y = *Tensor::FromVector<int64_t>(labels);
      for (int d = 0; d < 2; ++d) {
        ASSERT_TRUE(optimizers[d]->ZeroGrad().ok());
        absl::StatusOr<Tensor> logits = models[d]->Forward(d == 0 ? x : OnGpu(x));
        ASSERT_TRUE(logits.ok()) << logits.status();
        absl::StatusOr<CrossEntropyResult> ce = CrossEntropy(*logits, y);
        ASSERT_TRUE(ce.ok()) << ce.status();
        ASSERT_TRUE(models[d]->Backward(ce->grad_logits, false).ok());
        ASSERT_TRUE(optimizers[d]->Step().ok());
      }
    }
    std::vector<Parameter*> cpu = models[0]->Parameters(), gpu = models[1]->Parameters();
    for (size_t i = 0; i < cpu.size(); ++i) {
      std::vector<float> c = Host(cpu[i]->value), g = Host(gpu[i]->value);
      for (size_t k = 0; k < c.size(); ++k) {
        ASSERT_NEAR(g[k], c[k], 1e-4 * std::fabs(c[k]) + 1e-5) << (adamw ? "AdamW " : "SGD ") << i;
      }
    }
  }
}

}  // namespace
}  // namespace lockstep
