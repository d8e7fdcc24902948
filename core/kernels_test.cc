#include "core/kernels.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/testing/reference.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

constexpr int64_t kCounts[] = {0, 1, 7, 1001, 4099};

template <typename T>
Tensor MakeTensor(const std::vector<T>& values) {
  if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> has no contiguous elements.
    Tensor t = *Tensor::Empty({static_cast<int64_t>(values.size())}, DType::kBool);
    for (size_t i = 0; i < values.size(); ++i) t.data<bool>()[i] = values[i];
    return t;
  } else {
    absl::StatusOr<Tensor> t = Tensor::FromVector<T>(values);
    EXPECT_TRUE(t.ok()) << t.status();
    return *t;
  }
}

template <typename T>
std::vector<T> Values(const Tensor& t) {
  return *t.ToVector<T>();
}

template <typename T>
void ExpectSame(const std::vector<T>& actual, const std::vector<T>& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_TRUE(reference::SameElement(actual[i], expected[i]))
        << what << " element " << i << ": got " << reference::ToDouble(actual[i]) << " expected "
        << reference::ToDouble(expected[i]);
  }
}

template <typename T>
void CheckReduce(ReduceOp op, int num_inputs, int64_t count, bool in_place) {
  const std::string what = std::string(DTypeName(DTypeOf<T>::value)) + " " + std::string(ReduceOpName(op)) +
                           " inputs=" + std::to_string(num_inputs) + " count=" + std::to_string(count) +
                           (in_place ? " in place" : "");
  std::vector<std::vector<T>> values;
  std::vector<Tensor> inputs;
  for (int k = 0; k < num_inputs; ++k) {
    values.push_back(reference::RandomValues<T>(count, 1000 * k + static_cast<uint32_t>(count)));
    inputs.push_back(MakeTensor(values.back()));
  }
  std::vector<T> expected(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    std::vector<T> column;
    for (int k = 0; k < num_inputs; ++k) column.push_back(values[k][i]);
    expected[i] = reference::ReduceElement(op, column);
  }
  Tensor out = in_place ? inputs[0] : *Tensor::Empty({count}, DTypeOf<T>::value);
  ASSERT_TRUE(Reduce(op, inputs, out).ok()) << what;
  ExpectSame(Values<T>(out), expected, what);
}

template <typename T>
class KernelsTest : public ::testing::Test {};

using AllTypes = ::testing::Types<float, double, Half, BFloat16, int32_t, int64_t, uint8_t, int8_t, bool>;
TYPED_TEST_SUITE(KernelsTest, AllTypes);

// The reduce ops defined for T: bitwise ones for integers and bool only,
// AVG for everything but bool.
template <typename T>
bool Applies(ReduceOp op) {
  if (IsBitwise(op)) return std::is_integral_v<T>;
  return !(op == ReduceOp::kAvg && std::is_same_v<T, bool>);
}

TYPED_TEST(KernelsTest, ReduceMatchesReferenceForEveryOpAndSize) {
  for (ReduceOp op : kAllReduceOps) {
    if (!Applies<TypeParam>(op)) continue;
    for (int64_t count : kCounts) {
      for (int inputs : {1, 2, 3, 5}) {
        CheckReduce<TypeParam>(op, inputs, count, /*in_place=*/false);
        CheckReduce<TypeParam>(op, inputs, count, /*in_place=*/true);
      }
    }
  }
}

// The output may be any one of the inputs, not only the first.
TYPED_TEST(KernelsTest, OutputMayAliasALaterInput) {
  using T = TypeParam;
  for (ReduceOp op : kAllReduceOps) {
    if (!Applies<T>(op)) continue;
    const int64_t count = 1001;
    const std::vector<T> a = reference::RandomValues<T>(count, 21);
    const std::vector<T> b = reference::RandomValues<T>(count, 22);
    const std::vector<T> c = reference::RandomValues<T>(count, 23);
    for (int n : {2, 3}) {  // 2: the fused pairwise paths; 3: the blocked path.
      Tensor tb = MakeTensor(b);
      const Tensor inputs[] = {MakeTensor(a), tb, MakeTensor(c)};
      ASSERT_TRUE(Reduce(op, absl::MakeConstSpan(inputs, n), tb).ok());
      std::vector<T> expected(count);
      for (int64_t i = 0; i < count; ++i) {
        expected[i] =
            reference::ReduceElement(op, n == 2 ? std::vector<T>{a[i], b[i]} : std::vector<T>{a[i], b[i], c[i]});
      }
      ExpectSame(Values<T>(tb), expected,
                 std::string("aliased ") + std::string(ReduceOpName(op)) + " n=" + std::to_string(n));
    }
  }
}

TYPED_TEST(KernelsTest, ReduceIntoAccumulatesInPlace) {
  using T = TypeParam;
  const int64_t count = 1001;
  const std::vector<T> a = reference::RandomValues<T>(count, 1);
  const std::vector<T> b = reference::RandomValues<T>(count, 2);
  Tensor dst = MakeTensor(a);
  ASSERT_TRUE(ReduceInto(ReduceOp::kSum, MakeTensor(b), dst).ok());
  std::vector<T> expected(count);
  for (int64_t i = 0; i < count; ++i)
    expected[i] = reference::ReduceElement(ReduceOp::kSum, std::vector<T>{a[i], b[i]});
  ExpectSame(Values<T>(dst), expected, "ReduceInto");
}

TYPED_TEST(KernelsTest, ScaleMatchesReference) {
  using T = TypeParam;
  for (int64_t count : kCounts) {
    for (double factor : {0.5, -3.0, 1.0 / 3.0, 0.0, 1e3}) {
      const std::vector<T> values = reference::RandomValues<T>(count, 7);
      Tensor t = MakeTensor(values);
      ASSERT_TRUE(Scale(t, factor).ok());
      std::vector<T> expected(count);
      for (int64_t i = 0; i < count; ++i) {
        if constexpr (std::is_integral_v<T>) {
          const double s = std::trunc(static_cast<double>(values[i]) * factor);
          const double lo = static_cast<double>(std::numeric_limits<T>::min());
          const double hi = static_cast<double>(std::numeric_limits<T>::max());
          expected[i] = s <= lo ? std::numeric_limits<T>::min()
                                : (s >= hi ? std::numeric_limits<T>::max() : static_cast<T>(static_cast<int64_t>(s)));
        } else if constexpr (std::is_same_v<T, double>) {
          expected[i] = values[i] * factor;
        } else {
          const float f = static_cast<float>(reference::ToDouble(values[i])) * static_cast<float>(factor);
          if constexpr (std::is_same_v<T, float>) expected[i] = f;
          if constexpr (std::is_same_v<T, Half>) expected[i] = reference::HalfFromFloat(f);
          if constexpr (std::is_same_v<T, BFloat16>) expected[i] = reference::BFloat16FromFloat(f);
        }
      }
      ExpectSame(Values<T>(t), expected, "Scale by " + std::to_string(factor));
    }
  }
}

TYPED_TEST(KernelsTest, DivideMatchesReference) {
  using T = TypeParam;
  for (int64_t count : kCounts) {
    for (int64_t divisor : {1, 2, 3, 7}) {
      const std::vector<T> values = reference::RandomValues<T>(count, 13);
      Tensor t = MakeTensor(values);
      ASSERT_TRUE(Divide(t, divisor).ok());
      std::vector<T> expected(count);
      for (int64_t i = 0; i < count; ++i) {
        if constexpr (std::is_integral_v<T>) {
          expected[i] = static_cast<T>(static_cast<int64_t>(values[i]) / divisor);
        } else if constexpr (std::is_same_v<T, double>) {
          expected[i] = values[i] / static_cast<double>(divisor);
        } else {
          const float f = static_cast<float>(reference::ToDouble(values[i])) / static_cast<float>(divisor);
          if constexpr (std::is_same_v<T, float>) expected[i] = f;
          if constexpr (std::is_same_v<T, Half>) expected[i] = reference::HalfFromFloat(f);
          if constexpr (std::is_same_v<T, BFloat16>) expected[i] = reference::BFloat16FromFloat(f);
        }
      }
      ExpectSame(Values<T>(t), expected, "Divide by " + std::to_string(divisor));
    }
  }
  Tensor t = MakeTensor(reference::RandomValues<T>(3, 1));
  EXPECT_FALSE(Divide(t, 0).ok());
  EXPECT_FALSE(Divide(t, -2).ok());
}

TYPED_TEST(KernelsTest, AllFiniteFindsInfAndNanAnywhere) {
  using T = TypeParam;
  for (int64_t count : kCounts) {
    const std::vector<T> finite = reference::RandomValues<T>(count, 3, /*specials=*/false);
    EXPECT_TRUE(*AllFinite(MakeTensor(finite))) << count;
    if constexpr (!std::is_integral_v<T>) {
      for (int64_t pos : {int64_t{0}, count / 2, count - 1}) {
        if (count == 0) continue;
        for (double bad : {INFINITY, -INFINITY, NAN}) {
          std::vector<T> values = finite;
          if constexpr (std::is_same_v<T, Half>)
            values[pos] = reference::HalfFromFloat(static_cast<float>(bad));
          else if constexpr (std::is_same_v<T, BFloat16>)
            values[pos] = reference::BFloat16FromFloat(static_cast<float>(bad));
          else
            values[pos] = static_cast<T>(bad);
          EXPECT_FALSE(*AllFinite(MakeTensor(values))) << "count " << count << " pos " << pos;
        }
      }
    }
  }
}

// Cast between every pair of floating types against the reference rounding.
template <typename From, typename To>
void CheckCast() {
  for (int64_t count : kCounts) {
    const std::vector<From> values = reference::RandomValues<From>(count, 11);
    Tensor dst = *Tensor::Empty({count}, DTypeOf<To>::value);
    ASSERT_TRUE(Cast(MakeTensor(values), dst).ok());
    std::vector<To> expected(count);
    for (int64_t i = 0; i < count; ++i) {
      const double v = reference::ToDouble(values[i]);
      if constexpr (std::is_same_v<To, Half>)
        expected[i] = reference::HalfFromDouble(v);
      else if constexpr (std::is_same_v<To, BFloat16>)
        expected[i] = reference::BFloat16FromDouble(v);
      else
        expected[i] = static_cast<To>(v);
    }
    ExpectSame(Values<To>(dst), expected,
               std::string("Cast ") + std::string(DTypeName(DTypeOf<From>::value)) + "->" +
                   std::string(DTypeName(DTypeOf<To>::value)));
  }
}

template <typename From>
void CheckCastFrom() {
  CheckCast<From, float>();
  CheckCast<From, double>();
  CheckCast<From, Half>();
  CheckCast<From, BFloat16>();
}

TEST(CastTest, EveryFloatingPairMatchesReference) {
  CheckCastFrom<float>();
  CheckCastFrom<double>();
  CheckCastFrom<Half>();
  CheckCastFrom<BFloat16>();
}

TEST(CastTest, DoubleToHalfRoundsOnce) {
  // f64 -> f32 would round this up to the f16 midpoint 1 + 2^-11, and the
  // midpoint would then round to even (1.0); rounded once it is 1 + 2^-10.
  const double d = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  Tensor src = MakeTensor(std::vector<double>{d, -d});
  Tensor half = *Tensor::Empty({2}, DType::kF16);
  ASSERT_TRUE(Cast(src, half).ok());
  EXPECT_EQ(half.data<Half>()[0].bits, 0x3c01);
  EXPECT_EQ(half.data<Half>()[1].bits, 0xbc01);
  // The same trap for bf16 (8-bit significand).
  const double e = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  Tensor bf = *Tensor::Empty({1}, DType::kBF16);
  ASSERT_TRUE(Cast(MakeTensor(std::vector<double>{e}), bf).ok());
  EXPECT_EQ(bf.data<BFloat16>()[0].bits, 0x3f81);
}

TEST(KernelErrorsTest, DTypeMismatchIsRejectedAndNothingIsWritten) {
  Tensor out = MakeTensor(std::vector<float>{1, 2, 3});
  Tensor other = MakeTensor(std::vector<double>{1, 2, 3});
  const absl::Status s = ReduceInto(ReduceOp::kSum, other, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Reduce(SUM)"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("f64"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("f32"), absl::string_view::npos) << s;
  EXPECT_EQ(Values<float>(out), (std::vector<float>{1, 2, 3}));
}

TEST(KernelErrorsTest, SizeDeviceAndAliasingErrors) {
  Tensor out = MakeTensor(std::vector<float>{1, 2, 3});
  const absl::Status size = ReduceInto(ReduceOp::kMax, MakeTensor(std::vector<float>{1, 2}), out);
  EXPECT_EQ(size.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(size.message().find("2 elements"), absl::string_view::npos) << size;

  Tensor elsewhere = *MakeTensor(std::vector<float>{1, 2, 3}).To(Device::Cpu(1));
  const absl::Status device = ReduceInto(ReduceOp::kSum, elsewhere, out);
  EXPECT_NE(device.message().find("cpu:1"), absl::string_view::npos) << device;

  Tensor big = MakeTensor(std::vector<float>{1, 2, 3, 4});
  Tensor head = *big.Flat(0, 3), tail = *big.Flat(1, 3);
  const absl::Status overlap = ReduceInto(ReduceOp::kSum, tail, head);
  EXPECT_NE(overlap.message().find("overlaps"), absl::string_view::npos) << overlap;
  EXPECT_EQ(Values<float>(big), (std::vector<float>{1, 2, 3, 4}));

  EXPECT_FALSE(Reduce(ReduceOp::kSum, {}, out).ok());
  EXPECT_FALSE(Reduce(ReduceOp::kSum, {Tensor()}, out).ok());
  EXPECT_FALSE(Reduce(static_cast<ReduceOp>(9), {out}, out).ok());
}

TEST(KernelErrorsTest, BitwiseOpsNeedIntegersAndBoolHasNoAverage) {
  Tensor f = MakeTensor(std::vector<float>{1, 2});
  const absl::Status band = ReduceInto(ReduceOp::kBand, f, f);
  EXPECT_EQ(band.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(band.message().find("BAND applies to integer and bool elements, not f32"), absl::string_view::npos) << band;
  EXPECT_EQ(Values<float>(f), (std::vector<float>{1, 2}));
  const std::vector<double> d = {1, 2};
  std::vector<double> out(2);
  EXPECT_FALSE(ReduceHost(ReduceOp::kBxor, DType::kF64, d.data(), d.data(), out.data(), 2).ok());
  Tensor b = MakeTensor(std::vector<bool>{true, false});
  const absl::Status avg = ReduceInto(ReduceOp::kAvg, b, b);
  EXPECT_NE(avg.message().find("AVG has no meaning for bool"), absl::string_view::npos) << avg;
}

TEST(ReduceHostTest, MatchesReduceOnTensorsAndChecksPointers) {
  const std::vector<float> a = {1.5f, -2.0f, NAN, 4.0f}, b = {0.25f, 7.0f, 1.0f, -4.0f};
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProd}) {
    Tensor expected = MakeTensor(a);
    ASSERT_TRUE(ReduceInto(op, MakeTensor(b), expected).ok());
    std::vector<float> out = a;  // In place over the first operand, as the ring does.
    ASSERT_TRUE(ReduceHost(op, DType::kF32, out.data(), b.data(), out.data(), 4).ok());
    const std::vector<float> want = Values<float>(expected);
    EXPECT_EQ(std::memcmp(out.data(), want.data(), sizeof(float) * 4), 0) << ReduceOpName(op);
  }
  std::vector<float> out(4);
  EXPECT_TRUE(ReduceHost(ReduceOp::kSum, DType::kF32, a.data(), b.data(), out.data(), 0).ok());
  const char* bytes = reinterpret_cast<const char*>(b.data());
  const absl::Status misaligned = ReduceHost(ReduceOp::kSum, DType::kF32, a.data(), bytes + 1, out.data(), 2);
  EXPECT_EQ(misaligned.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(misaligned.message().find("aligned"), absl::string_view::npos) << misaligned;
  EXPECT_FALSE(ReduceHost(ReduceOp::kSum, DType::kF32, nullptr, b.data(), out.data(), 4).ok());
  EXPECT_FALSE(ReduceHost(ReduceOp::kSum, DType::kF32, a.data(), b.data(), out.data(), -1).ok());
  EXPECT_FALSE(ReduceHost(static_cast<ReduceOp>(9), DType::kF32, a.data(), b.data(), out.data(), 4).ok());
}

TEST(KernelErrorsTest, ScaleAndCastRejectBadArguments) {
  Tensor t = MakeTensor(std::vector<float>{1, 2});
  EXPECT_FALSE(Scale(t, NAN).ok());
  EXPECT_FALSE(Scale(t, INFINITY).ok());
  EXPECT_EQ(Values<float>(t), (std::vector<float>{1, 2}));
  Tensor ints = *Tensor::Empty({2}, DType::kI32);
  const absl::Status cast = Cast(t, ints);
  EXPECT_NE(cast.message().find("f32 to i32"), absl::string_view::npos) << cast;
  Tensor small = *Tensor::Empty({1}, DType::kF16);
  EXPECT_FALSE(Cast(t, small).ok());
  EXPECT_FALSE(AllFinite(Tensor()).ok());
}

TEST(KernelErrorsTest, CudaTensorsWithoutADeviceFailClearly) {
  if (cuda::DeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  const absl::StatusOr<Tensor> t = Tensor::Empty({4}, DType::kF32, Device::Cuda(0));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("CUDA"), absl::string_view::npos) << t.status();
}

}  // namespace
}  // namespace lockstep
