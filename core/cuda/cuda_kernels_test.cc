// CUDA kernels and copies against the CPU kernels (bit for bit) and the
// independent reference. Skips when no CUDA device is visible.
#include <string>
#include <vector>

#include "core/cuda/cuda_runtime.h"
#include "core/kernels.h"
#include "core/tensor.h"
#include "core/testing/reference.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  }
};

template <typename T>
Tensor OnGpu(const std::vector<T>& values) {
  return *Tensor::FromVector<T>(values)->To(Device::Cuda(0));
}

template <typename T>
void ExpectSame(const std::vector<T>& a, const std::vector<T>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(reference::SameElement(a[i], b[i])) << what << " element " << i;
  }
}

template <typename T>
void CompareReduce(ReduceOp op, int num_inputs, int64_t count) {
  const std::string what = std::string(DTypeName(DTypeOf<T>::value)) + " " + std::string(ReduceOpName(op)) +
                           " n=" + std::to_string(num_inputs) + " count=" + std::to_string(count);
  std::vector<Tensor> cpu_inputs, gpu_inputs;
  for (int k = 0; k < num_inputs; ++k) {
    auto values = reference::RandomValues<T>(count, 77 * k + 5);
    cpu_inputs.push_back(*Tensor::FromVector<T>(values));
    gpu_inputs.push_back(OnGpu(values));
  }
  Tensor cpu_out = *Tensor::Empty({count}, DTypeOf<T>::value);
  Tensor gpu_out = *Tensor::Empty({count}, DTypeOf<T>::value, Device::Cuda(0));
  ASSERT_TRUE(Reduce(op, cpu_inputs, cpu_out).ok()) << what;
  const absl::Status s = Reduce(op, gpu_inputs, gpu_out);
  ASSERT_TRUE(s.ok()) << what << ": " << s;
  ExpectSame(*gpu_out.ToVector<T>(), *cpu_out.ToVector<T>(), what);
}

template <typename T>
class CudaKernelsTest : public CudaTest {};
using AllTypes = ::testing::Types<float, double, Half, BFloat16, int32_t, int64_t, uint8_t, int8_t>;
TYPED_TEST_SUITE(CudaKernelsTest, AllTypes);

TYPED_TEST(CudaKernelsTest, ReduceMatchesCpu) {
  for (ReduceOp op : kAllReduceOps) {
    if (IsBitwise(op) && !std::is_integral_v<TypeParam>) continue;  // Refused on both.
    for (int64_t count : {0, 1, 7, 1001, (1 << 20) + 3}) {
      for (int n : {1, 2, 3}) CompareReduce<TypeParam>(op, n, count);
    }
  }
}

TYPED_TEST(CudaKernelsTest, ScaleAndAllFiniteMatchCpu) {
  using T = TypeParam;
  for (int64_t count : {0, 1, 7, 100003}) {
    auto values = reference::RandomValues<T>(count, 9);
    Tensor cpu = *Tensor::FromVector<T>(values);
    Tensor gpu = OnGpu(values);
    ASSERT_TRUE(Scale(cpu, 0.37).ok());
    ASSERT_TRUE(Scale(gpu, 0.37).ok());
    ExpectSame(*gpu.ToVector<T>(), *cpu.ToVector<T>(), "Scale");
    ASSERT_TRUE(Divide(cpu, 3).ok());
    ASSERT_TRUE(Divide(gpu, 3).ok());
    ExpectSame(*gpu.ToVector<T>(), *cpu.ToVector<T>(), "Divide");
    EXPECT_EQ(*AllFinite(gpu), *AllFinite(cpu)) << count;
    auto finite = reference::RandomValues<T>(count, 10, /*specials=*/false);
    EXPECT_TRUE(*AllFinite(OnGpu(finite)));
  }
}

template <typename From, typename To>
void CompareCast() {
  auto values = reference::RandomValues<From>(10007, 3);
  Tensor cpu_out = *Tensor::Empty({10007}, DTypeOf<To>::value);
  Tensor gpu_out = *Tensor::Empty({10007}, DTypeOf<To>::value, Device::Cuda(0));
  ASSERT_TRUE(Cast(*Tensor::FromVector<From>(values), cpu_out).ok());
  ASSERT_TRUE(Cast(OnGpu(values), gpu_out).ok());
  ExpectSame(*gpu_out.ToVector<To>(), *cpu_out.ToVector<To>(), "Cast");
}

TEST_F(CudaTest, CastMatchesCpuForEveryPair) {
  CompareCast<float, Half>();
  CompareCast<float, BFloat16>();
  CompareCast<double, Half>();
  CompareCast<double, BFloat16>();
  CompareCast<Half, float>();
  CompareCast<BFloat16, float>();
  CompareCast<Half, BFloat16>();
  CompareCast<float, double>();
  CompareCast<double, float>();
}

TEST_F(CudaTest, CopiesRoundTripThroughPinnedMemoryOnAStream) {
  const int64_t n = (1 << 22) + 5;
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 9973) * 0.5f;
  Tensor host = *Tensor::FromVector<float>(values);
  Tensor pinned = *Tensor::Empty({n}, DType::kF32, Device::Cpu(), /*pinned=*/true);
  EXPECT_TRUE(pinned.is_pinned());
  ASSERT_TRUE(pinned.CopyFrom(host).ok());
  Tensor gpu = *Tensor::Empty({n}, DType::kF32, Device::Cuda(0));
  Tensor back = *Tensor::Empty({n}, DType::kF32, Device::Cpu(), /*pinned=*/true);
  cuda::Stream stream = *cuda::Stream::Create(0);
  ASSERT_TRUE(gpu.CopyFromAsync(pinned, stream).ok());
  ASSERT_TRUE(back.CopyFromAsync(gpu, stream).ok());
  ASSERT_TRUE(stream.Synchronize().ok());
  EXPECT_EQ(*back.ToVector<float>(), values);
  // Device-to-device into a view.
  Tensor gpu2 = *Tensor::Zeros({n + 10}, DType::kF32, Device::Cuda(0));
  Tensor window = *gpu2.Flat(10, n);
  ASSERT_TRUE(window.CopyFrom(gpu).ok());
  EXPECT_EQ(*window.ToVector<float>(), values);
}

TEST_F(CudaTest, MissingDeviceAndMixedDevicesAreErrors) {
  const int count = cuda::DeviceCount();
  const absl::StatusOr<Tensor> missing = Tensor::Empty({4}, DType::kF32, Device::Cuda(count));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("does not exist"), absl::string_view::npos);
  Tensor gpu = *Tensor::Zeros({4}, DType::kF32, Device::Cuda(0));
  Tensor cpu = *Tensor::Zeros({4}, DType::kF32);
  const absl::Status mixed = ReduceInto(ReduceOp::kSum, cpu, gpu);
  EXPECT_NE(mixed.message().find("cpu:0"), absl::string_view::npos) << mixed;
}

}  // namespace
}  // namespace lockstep
