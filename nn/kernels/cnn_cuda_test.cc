// The convolutional layers on CUDA against the CPU: BatchNorm bit for bit
// (the same arithmetic and summation order on both devices), Conv2d through
// cuDNN and through the im2col + cuBLAS fallback within
// nn/testing/error_bound.h's radius of an f64 reference (the bound the CPU
// kernels meet). Skips when no CUDA device is visible.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda/cuda_runtime.h"
#include "core/kernels.h"
#include "core/mt19937.h"
#include "core/status.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "nn/batch_norm.h"
#include "nn/conv2d.h"
#include "nn/init.h"
#include "nn/max_pool2d.h"
#include "nn/relu.h"
#include "nn/testing/error_bound.h"

namespace lockstep {
namespace {

namespace eb = error_bound;

class CnnCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  }
};

Tensor Random(const Shape& shape, Mt19937& gen) {
  Tensor t = *Tensor::Empty(shape, DType::kF32, Device::Cpu());
  EXPECT_TRUE(UniformFill(t, -1.0, 1.0, gen).ok());
  return t;
}

Tensor OnGpu(const Tensor& t) { return *t.To(Device::Cuda(0)); }
Tensor OnCpu(const Tensor& t) { return t.defined() ? *t.To(Device::Cpu()) : Tensor(); }

// Bitwise equality of two tensors' values (either device).
void ExpectSameBits(const Tensor& cpu, const Tensor& gpu, const std::string& what) {
  ASSERT_EQ(cpu.defined(), gpu.defined()) << what;
  if (!cpu.defined()) return;
  ASSERT_EQ(cpu.shape(), gpu.shape()) << what;
  ASSERT_EQ(cpu.dtype(), gpu.dtype()) << what;
  const Tensor a = OnCpu(cpu), b = OnCpu(gpu);
  const unsigned char* pa = static_cast<const unsigned char*>(a.raw_data());
  const unsigned char* pb = static_cast<const unsigned char*>(b.raw_data());
  size_t first = a.nbytes();
  for (size_t i = 0; i < a.nbytes(); ++i) {
    if (pa[i] != pb[i]) {
      first = i;
      break;
    }
  }
  EXPECT_EQ(first, a.nbytes()) << what << ": first differing byte " << first << " of " << a.nbytes();
}

struct BnCase {
  std::string name;
  Shape shape;
  bool two_d;
  bool affine;
  std::optional<double> momentum;
  bool track;
};

absl::StatusOr<std::unique_ptr<BatchNorm>> MakeBn(const BnCase& c) {
  BatchNormOptions o;
  o.num_features = c.shape[1];
  o.affine = c.affine;
  o.momentum = c.momentum;
  o.track_running_stats = c.track;
  if (c.two_d) {
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<BatchNorm2d> bn, BatchNorm2d::Create(o));
    return std::unique_ptr<BatchNorm>(std::move(bn));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<BatchNorm1d> bn, BatchNorm1d::Create(o));
  return std::unique_ptr<BatchNorm>(std::move(bn));
}

TEST_F(CnnCudaTest, BatchNormMatchesTheCpuBitForBit) {
  const std::vector<BnCase> cases = {
      {"2d, the CNN's first block", {8, 32, 28, 28}, true, true, 0.1, true},
      {"2d, odd plane (a lane tail), no affine, cumulative average", {3, 5, 7, 9}, true, false, std::nullopt, true},
      {"2d, no running statistics", {4, 6, 5, 5}, true, true, 0.1, false},
      {"1d [N, C]", {16, 10}, false, true, 0.3, true},
      {"1d [N, C, L]", {4, 3, 33}, false, true, 0.1, true},
  };
  Mt19937 gen(5);
  for (const BnCase& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<std::unique_ptr<BatchNorm>> cpu = MakeBn(c);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    if (c.affine) {  // non-trivial parameters, the same on both devices
      ASSERT_TRUE(UniformFill((*cpu)->weight().value, 0.5, 1.5, gen).ok());
      ASSERT_TRUE(UniformFill((*cpu)->bias().value, -0.5, 0.5, gen).ok());
    }
    absl::StatusOr<std::unique_ptr<Module>> gpu_module = (*cpu)->CloneTo(Device::Cuda(0));
    ASSERT_TRUE(gpu_module.ok()) << gpu_module.status();
    auto* gpu = static_cast<BatchNorm*>(gpu_module->get());
    // Two training steps (the running statistics move twice), then one in
    // evaluation mode (normalized with them).
    for (int step = 0; step < 3; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      const bool train = step < 2;
      (*cpu)->Train(train);
      gpu->Train(train);
      Tensor x = Random(c.shape, gen), dy = Random(c.shape, gen);
      // An offset per step so the mean is not ~0.
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] += 0.25f * static_cast<float>(step + 1);
      ASSERT_TRUE((*cpu)->ZeroGrad().ok());
      ASSERT_TRUE(gpu->ZeroGrad().ok());
      absl::StatusOr<Tensor> y_cpu = (*cpu)->Forward(x);
      absl::StatusOr<Tensor> y_gpu = gpu->Forward(OnGpu(x));
      ASSERT_TRUE(y_cpu.ok()) << y_cpu.status();
      ASSERT_TRUE(y_gpu.ok()) << y_gpu.status();
      EXPECT_TRUE(y_gpu->device().is_cuda());
      ExpectSameBits(*y_cpu, *y_gpu, "output");
      absl::StatusOr<Tensor> dx_cpu = (*cpu)->Backward(dy);
      absl::StatusOr<Tensor> dx_gpu = gpu->Backward(OnGpu(dy));
      ASSERT_TRUE(dx_cpu.ok()) << dx_cpu.status();
      ASSERT_TRUE(dx_gpu.ok()) << dx_gpu.status();
      ExpectSameBits(*dx_cpu, *dx_gpu, "input grad");
      if (c.affine) {
        ExpectSameBits((*cpu)->weight().grad, gpu->weight().grad, "weight grad");
        ExpectSameBits((*cpu)->bias().grad, gpu->bias().grad, "bias grad");
      }
      if (c.track) {
        ExpectSameBits((*cpu)->running_mean(), gpu->running_mean(), "running_mean");
        ExpectSameBits((*cpu)->running_var(), gpu->running_var(), "running_var");
        ExpectSameBits((*cpu)->num_batches_tracked(), gpu->num_batches_tracked(), "num_batches_tracked");
      }
    }
  }
}

TEST_F(CnnCudaTest, BatchNormRefusesATooSmallBatchOnCuda) {
  BatchNormOptions o;
  o.num_features = 3;
  o.device = Device::Cuda(0);
  absl::StatusOr<std::unique_ptr<BatchNorm1d>> bn = BatchNorm1d::Create(o);
  ASSERT_TRUE(bn.ok()) << bn.status();
  Mt19937 gen(1);
  absl::StatusOr<Tensor> y = (*bn)->Forward(OnGpu(Random({1, 3}, gen)));
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument) << y.status();
  // Nothing changed: the buffers are still the initial ones.
  EXPECT_EQ(OnCpu((*bn)->num_batches_tracked()).data<int64_t>()[0], 0);
}

struct ConvCase {
  eb::ConvShape s;
  bool bias;
};

std::vector<ConvCase> ConvCases() {
  std::vector<ConvCase> cases;
  for (const eb::ConvShape& s : std::vector<eb::ConvShape>{
           {8, 1, 28, 28, 32, 3, 1, 1},   // the CNN's first layer
           {8, 32, 14, 14, 64, 3, 1, 1},  // its second
           {3, 2, 7, 9, 5, 3, 2, 1},      // stride 2, odd, non-square input
           {1, 1, 5, 5, 2, 5, 1, 2},      // kernel as large as the input
           {2, 4, 6, 6, 3, 1, 1, 0},      // 1x1
           {2, 3, 9, 7, 4, 2, 2, 0},      // even kernel, no padding
       }) {
    cases.push_back({s, true});
    cases.push_back({s, false});
  }
  return cases;
}

std::string Name(const ConvCase& c) {
  const eb::ConvShape& s = c.s;
  return "n" + std::to_string(s.n) + " c" + std::to_string(s.c) + " " + std::to_string(s.h) + "x" +
         std::to_string(s.w) + " o" + std::to_string(s.o) + " k" + std::to_string(s.k) + " s" +
         std::to_string(s.stride) + " p" + std::to_string(s.pad) + (c.bias ? " bias" : "");
}

// A Conv2d made on the CPU (PyTorch's initialization) and its copy on cuda:0.
struct ConvPair {
  std::unique_ptr<Conv2d> cpu;
  std::unique_ptr<Module> gpu;
  Conv2d& on_gpu() { return *static_cast<Conv2d*>(gpu.get()); }
};

absl::StatusOr<ConvPair> MakeConvPair(const ConvCase& c, Mt19937& gen) {
  Conv2dOptions o;
  o.in_channels = c.s.c;
  o.out_channels = c.s.o;
  o.kernel_h = o.kernel_w = c.s.k;
  o.stride_h = o.stride_w = c.s.stride;
  o.pad_h = o.pad_w = c.s.pad;
  o.bias = c.bias;
  ConvPair pair;
  LOCKSTEP_ASSIGN_OR_RETURN(pair.cpu, Conv2d::Create(o, gen));
  LOCKSTEP_ASSIGN_OR_RETURN(pair.gpu, pair.cpu->CloneTo(Device::Cuda(0)));
  return pair;
}

// One forward and backward of the cuda:0 copy on a random input, against
// the f64 reference computed from the CPU values.
void CheckStepOnCuda(ConvPair& pair, const ConvCase& c, Mt19937& gen) {
  SCOPED_TRACE(Name(c));
  const eb::ConvShape& s = c.s;
  Conv2d& conv = pair.on_gpu();
  Tensor x = Random({s.n, s.c, s.h, s.w}, gen), dy = Random({s.n, s.o, s.out_h(), s.out_w()}, gen);
  ASSERT_TRUE(conv.ZeroGrad().ok());
  absl::StatusOr<Tensor> y = conv.Forward(OnGpu(x));
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_TRUE(y->device().is_cuda());
  absl::StatusOr<Tensor> dx = conv.Backward(OnGpu(dy));
  ASSERT_TRUE(dx.ok()) << dx.status();
  const eb::Matrix mx = eb::FromTensor(x);
  const eb::Matrix mw = eb::FromTensor(pair.cpu->weight().value);
  eb::Matrix mb(1, s.o);
  if (c.bias) mb = eb::FromTensor(pair.cpu->bias().value);  // else exact zeros
  const eb::Matrix want_y = eb::ConvForward(s, mx, mw, mb);
  const eb::LinearGrads want = eb::ConvBackward(s, mx, mw, eb::FromTensor(dy), /*input_grad=*/true);
  absl::Status st = eb::ExpectWithin(OnCpu(*y), want_y, "output");
  EXPECT_TRUE(st.ok()) << st;
  st = eb::ExpectWithin(OnCpu(*dx), want.dx, "input grad");
  EXPECT_TRUE(st.ok()) << st;
  st = eb::ExpectWithin(OnCpu(conv.weight().grad), want.dw, "weight grad");
  EXPECT_TRUE(st.ok()) << st;
  if (c.bias) {
    st = eb::ExpectWithin(OnCpu(conv.bias().grad), want.db, "bias grad");
    EXPECT_TRUE(st.ok()) << st;
  }
}

void CheckAllConvCases(uint64_t seed) {
  Mt19937 gen(seed);
  for (const ConvCase& c : ConvCases()) {
    absl::StatusOr<ConvPair> pair = MakeConvPair(c, gen);
    ASSERT_TRUE(pair.ok()) << pair.status();
    CheckStepOnCuda(*pair, c, gen);
    CheckStepOnCuda(*pair, c, gen);  // the shape's kept plan, new values
  }
}

TEST_F(CnnCudaTest, Conv2dOnCudaMatchesTheReference) {
#ifdef LOCKSTEP_EXPECT_CUDNN
  // Built with cuDNN: it must be what runs, not a silent fallback.
  EXPECT_EQ(Conv2d::CudaKernels().rfind("cuDNN ", 0), 0u) << Conv2d::CudaKernels();
#endif
  CheckAllConvCases(3);
}

TEST_F(CnnCudaTest, Conv2dFallbackOnCudaMatchesTheReference) {
  ASSERT_EQ(setenv("LOCKSTEP_NO_CUDNN", "1", 1), 0);
  EXPECT_EQ(Conv2d::CudaKernels().rfind("im2col + cuBLAS", 0), 0u) << Conv2d::CudaKernels();
  CheckAllConvCases(4);
  ASSERT_EQ(unsetenv("LOCKSTEP_NO_CUDNN"), 0);
}

// `m` with its f32 radius widened `factor` times: tensor cores may truncate
// their f32 additions rather than round them (a relative error of 2u per
// addition instead of u); 4 leaves room and stays far below one bf16 or f16
// step, which dominates these bounds.
eb::Matrix Widened(eb::Matrix m, double factor) {
  for (eb::Bounded& b : m.x) b.e *= factor;
  return m;
}

// Autocast on cuda:0: cuDNN's bf16/f16 convolution (f32 accumulation on
// tensor cores) against the f32 reference on the rounded operands. The
// output is rounded twice (the convolution's, then the bias add's, as
// PyTorch's cuDNN path adds the bias as a separate op), each gradient once.
void CheckRoundedStepOnCuda(ConvPair& pair, const ConvCase& c, DType dtype, Mt19937& gen) {
  SCOPED_TRACE(Name(c) + " " + std::string(DTypeName(dtype)));
  const eb::ConvShape& s = c.s;
  Conv2d& conv = pair.on_gpu();
  ASSERT_TRUE(conv.set_compute_dtype(dtype).ok());
  Tensor x = Random({s.n, s.c, s.h, s.w}, gen), dy = Random({s.n, s.o, s.out_h(), s.out_w()}, gen);
  ASSERT_TRUE(conv.ZeroGrad().ok());
  absl::StatusOr<Tensor> y = conv.Forward(OnGpu(x));
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->dtype(), dtype);
  absl::StatusOr<Tensor> dx = conv.Backward(OnGpu(dy));
  ASSERT_TRUE(dx.ok()) << dx.status();
  ASSERT_EQ(dx->dtype(), DType::kF32);
  const eb::Matrix mx = eb::FromTensor(eb::RoundedValues(x, dtype));
  const eb::Matrix mw = eb::FromTensor(eb::RoundedValues(pair.cpu->weight().value, dtype));
  eb::Matrix mb(1, s.o);
  if (c.bias) mb = eb::FromTensor(eb::RoundedValues(pair.cpu->bias().value, dtype));
  const eb::Matrix magnitude = eb::ConvForward(s, eb::Abs(mx), eb::Abs(mw), eb::Abs(mb));
  const eb::Matrix want_y =
      eb::RoundedTo(dtype, Widened(eb::ConvForward(s, mx, mw, mb), 4), c.bias ? 2 : 1, &magnitude);
  const eb::LinearGrads want =
      eb::ConvBackward(s, mx, mw, eb::FromTensor(eb::RoundedValues(dy, dtype)), /*input_grad=*/true);
  absl::Status st = eb::ExpectWithin(eb::WidenedToF32(OnCpu(*y)), want_y, "output");
  EXPECT_TRUE(st.ok()) << st;
  st = eb::ExpectWithin(OnCpu(*dx), eb::RoundedTo(dtype, Widened(want.dx, 4)), "input grad");
  EXPECT_TRUE(st.ok()) << st;
  st = eb::ExpectWithin(OnCpu(conv.weight().grad), eb::RoundedTo(dtype, Widened(want.dw, 4)), "weight grad");
  EXPECT_TRUE(st.ok()) << st;
  if (c.bias) {
    st = eb::ExpectWithin(OnCpu(conv.bias().grad), eb::RoundedTo(dtype, Widened(want.db, 4)), "bias grad");
    EXPECT_TRUE(st.ok()) << st;
  }
}

TEST_F(CnnCudaTest, Conv2dAutocastOnCudaMatchesTheRoundedReference) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    Mt19937 gen(dtype == DType::kBF16 ? 5 : 6);
    for (const ConvCase& c : ConvCases()) {
      absl::StatusOr<ConvPair> pair = MakeConvPair(c, gen);
      ASSERT_TRUE(pair.ok()) << pair.status();
      CheckRoundedStepOnCuda(*pair, c, dtype, gen);
      CheckRoundedStepOnCuda(*pair, c, dtype, gen);
    }
  }
}

// BatchNorm2d, ReLU and MaxPool2d on bf16 activations on cuda:0 give the
// CPU's bits (both widen to f32, compute as for f32 and round once).
TEST_F(CnnCudaTest, Bf16ActivationsOnCudaEqualTheCpu) {
  Mt19937 gen(8);
  BatchNormOptions o;
  o.num_features = 6;
  std::unique_ptr<BatchNorm2d> bn_cpu = *BatchNorm2d::Create(o);
  absl::StatusOr<std::unique_ptr<Module>> bn_gpu = bn_cpu->CloneTo(Device::Cuda(0));
  ASSERT_TRUE(bn_gpu.ok()) << bn_gpu.status();
  MaxPool2d pool_cpu(2), pool_gpu(2);
  ReLU relu_cpu, relu_gpu;
  Tensor x32 = Random({4, 6, 10, 10}, gen), g32 = Random({4, 6, 5, 5}, gen);
  Tensor x = *Tensor::Empty(x32.shape(), DType::kBF16, Device::Cpu());
  Tensor g = *Tensor::Empty(g32.shape(), DType::kBF16, Device::Cpu());
  ASSERT_TRUE(Cast(x32, x).ok() && Cast(g32, g).ok());
  auto run = [](Module& bn, Module& relu, Module& pool, const Tensor& in,
                const Tensor& grad) -> absl::StatusOr<std::pair<Tensor, Tensor>> {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor a, bn.Forward(in));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor b, relu.Forward(a));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor y, pool.Forward(b));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor gb, pool.Backward(grad));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor ga, relu.Backward(gb));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor gx, bn.Backward(ga));
    return std::make_pair(y, gx);
  };
  absl::StatusOr<std::pair<Tensor, Tensor>> cpu = run(*bn_cpu, relu_cpu, pool_cpu, x, g);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  absl::StatusOr<std::pair<Tensor, Tensor>> gpu = run(**bn_gpu, relu_gpu, pool_gpu, OnGpu(x), OnGpu(g));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(gpu->first.dtype(), DType::kBF16);
  EXPECT_EQ(gpu->second.dtype(), DType::kBF16);
  EXPECT_EQ(*eb::WidenedToF32(OnCpu(gpu->first)).ToVector<float>(), *eb::WidenedToF32(cpu->first).ToVector<float>());
  EXPECT_EQ(*eb::WidenedToF32(OnCpu(gpu->second)).ToVector<float>(), *eb::WidenedToF32(cpu->second).ToVector<float>());
}

TEST_F(CnnCudaTest, Conv2dOnCudaTakesChangingBatchSizes) {
  Mt19937 gen(9);
  ConvCase c{{4, 3, 10, 10, 6, 3, 1, 1}, true};
  absl::StatusOr<ConvPair> pair = MakeConvPair(c, gen);
  ASSERT_TRUE(pair.ok()) << pair.status();
  // More shapes than the plan cache keeps: some are evicted and made again.
  for (int64_t n : {4, 3, 4, 1, 2, 5, 6, 4}) {
    c.s.n = n;
    CheckStepOnCuda(*pair, c, gen);
  }
}

}  // namespace
}  // namespace lockstep
