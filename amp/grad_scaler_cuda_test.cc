// GradScaler on CUDA tensors: the same bits as on CPU. Skips when no CUDA
// device is visible.
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "amp/grad_scaler.h"
#include "core/cuda/cuda_runtime.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

class GradScalerCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  }
};

std::vector<uint8_t> Bytes(const Tensor& t) {
  Tensor host = *t.To(Device::Cpu());
  std::vector<uint8_t> out(host.nbytes());
  if (!out.empty()) std::memcpy(out.data(), host.raw_data(), out.size());
  return out;
}

// Values whose products round differently, of every magnitude, as raw bits.
Tensor Values(DType dtype, int64_t n) {
  Tensor t = *Tensor::Empty({n}, dtype);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  char* p = static_cast<char*>(t.raw_data());
  for (int64_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    uint64_t bits = x;
    if (dtype == DType::kF32) bits &= 0x7f7fffffull | (1ull << 31);  // Finite.
    if (dtype == DType::kF64) bits &= 0x7fefffffffffffffull | (1ull << 63);
    if (dtype == DType::kF16) bits &= 0xfbffull;
    if (dtype == DType::kBF16) bits &= 0xff7full;
    std::memcpy(p + i * t.element_size(), &bits, t.element_size());
  }
  return t;
}

TEST_F(GradScalerCudaTest, UnscaleAndScaleMatchCpuBitwise) {
  for (DType dtype : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
    for (double init_scale : {65536.0, 3.0, 1e-3}) {
      GradScalerOptions o;
      o.init_scale = init_scale;
      GradScaler cpu_scaler = *GradScaler::Create(o);
      GradScaler gpu_scaler = *GradScaler::Create(o);
      Tensor cpu = Values(dtype, 1000);
      Tensor gpu = *cpu.To(Device::Cuda(0));
      ASSERT_TRUE(cpu_scaler.Unscale({cpu}).ok());
      ASSERT_TRUE(gpu_scaler.Unscale({gpu}).ok());
      EXPECT_EQ(Bytes(cpu), Bytes(gpu)) << DTypeName(dtype) << " " << init_scale;
      ASSERT_TRUE(cpu_scaler.Scale(cpu).ok());
      ASSERT_TRUE(gpu_scaler.Scale(gpu).ok());
      EXPECT_EQ(Bytes(cpu), Bytes(gpu)) << DTypeName(dtype) << " " << init_scale;
    }
  }
}

TEST_F(GradScalerCudaTest, SkipsStepsWithInfOrNan) {
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> v(4099, 1.0f);
    v[4097] = bad;
    Tensor clean = *Tensor::FromVector<float>(std::vector<float>(33, 2.0f))->To(Device::Cuda(0));
    Tensor grad = *Tensor::FromVector<float>(v)->To(Device::Cuda(0));
    GradScaler s = *GradScaler::Create({});
    bool called = false;
    absl::StatusOr<bool> r = s.Step({clean, grad}, [&] {
      called = true;
      return absl::OkStatus();
    });
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(*r);
    EXPECT_FALSE(called);
    ASSERT_TRUE(s.Update().ok());
    EXPECT_EQ(s.scale(), 32768.0f);
  }
}

}  // namespace
}  // namespace lockstep
