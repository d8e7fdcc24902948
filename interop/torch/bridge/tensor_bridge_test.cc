#include "interop/torch/bridge/tensor_bridge.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/half.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(TensorBridgeTest, FromTorchSharesMemoryShapeAndDtype) {
  at::Tensor w = at::arange(12, at::kFloat).reshape({3, 4});
  absl::StatusOr<Tensor> t = FromTorch(w);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->shape(), (Shape{3, 4}));
  EXPECT_EQ(t->dtype(), DType::kF32);
  EXPECT_TRUE(t->device().is_cpu());
  EXPECT_EQ(t->raw_data(), w.data_ptr());  // No copy.
  t->data<float>()[5] = -1;                // Writes through to libtorch...
  EXPECT_EQ(w[1][1].item<float>(), -1);
  w[2][3] = 100;  // ...and back.
  EXPECT_EQ(t->data<float>()[11], 100);
}

TEST(TensorBridgeTest, AViewOfARowIsSharedAtItsOffset) {
  at::Tensor w = at::arange(12, at::kLong).reshape({3, 4});
  absl::StatusOr<Tensor> row = FromTorch(w[1]);  // Contiguous, storage offset 4.
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_EQ(*row->ToVector<int64_t>(), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(row->raw_data(), w[1].data_ptr());
}

TEST(TensorBridgeTest, FromTorchKeepsTheTorchStorageAlive) {
  absl::StatusOr<Tensor> t;
  {
    at::Tensor w = at::full({1000}, 7.0, at::kDouble);
    t = FromTorch(w);
    ASSERT_TRUE(t.ok());
  }  // The only at::Tensor handle is gone; the lockstep view keeps the memory.
  // Allocate and fill more torch memory: a freed block would be reused.
  at::Tensor other = at::full({1000}, -3.0, at::kDouble);
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(t->data<double>()[i], 7.0) << i;
  EXPECT_NE(other.data_ptr(), t->raw_data());
}

TEST(TensorBridgeTest, ToTorchSharesMemoryAndKeepsTheLockstepTensorAlive) {
  at::Tensor back;
  const void* data = nullptr;
  {
    absl::StatusOr<Tensor> t = Tensor::FromVector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
    ASSERT_TRUE(t.ok());
    data = t->raw_data();
    absl::StatusOr<at::Tensor> a = ToTorch(*t);
    ASSERT_TRUE(a.ok()) << a.status();
    back = *a;
  }
  EXPECT_EQ(back.data_ptr(), data);
  EXPECT_EQ(back.scalar_type(), at::kInt);
  EXPECT_EQ(back.sizes(), at::IntArrayRef({2, 3}));
  EXPECT_EQ(back.sum().item<int64_t>(), 21);
  EXPECT_FALSE(back.requires_grad());
}

// Every shared dtype, both ways, bit for bit (f16/bf16 included).
TEST(TensorBridgeTest, EveryDtypeRoundTripsBitForBit) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    absl::StatusOr<Tensor> t = Tensor::Zeros({5}, dtype);
    ASSERT_TRUE(t.ok());
    auto* bytes = static_cast<uint8_t*>(t->raw_data());
    for (size_t i = 0; i < t->nbytes(); ++i) {
      // Finite values; bool's bytes are 0 or 1 (libtorch may normalize others).
      bytes[i] = dtype == DType::kBool ? static_cast<uint8_t>(i % 2) : static_cast<uint8_t>(0x3C + 7 * i);
    }
    absl::StatusOr<at::Tensor> a = ToTorch(*t);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->scalar_type(), DTypeToTorch(dtype));
    EXPECT_EQ(static_cast<size_t>(a->element_size()), DTypeSize(dtype));
    at::Tensor copy = a->clone();  // libtorch's own memory
    absl::StatusOr<Tensor> back = FromTorch(copy);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->dtype(), dtype);
    EXPECT_EQ(std::memcmp(back->raw_data(), t->raw_data(), t->nbytes()), 0);
    absl::StatusOr<DType> again = DTypeFromTorch(DTypeToTorch(dtype));
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, dtype);
  }
  // A value libtorch computes in f16 reads back as lockstep's f16.
  absl::StatusOr<Tensor> h = FromTorch(at::full({1}, 1.5, at::kHalf));
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(HalfToFloat(h->data<Half>()[0]), 1.5f);
}

TEST(TensorBridgeTest, NonContiguousAndUnsupportedTensorsAreRefusedClearly) {
  at::Tensor w = at::zeros({3, 4});
  absl::StatusOr<Tensor> transposed = FromTorch(w.t());
  EXPECT_EQ(transposed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(transposed.status().message().find("is not contiguous"), std::string::npos) << transposed.status();
  EXPECT_NE(transposed.status().message().find(".contiguous()"), std::string::npos);
  EXPECT_TRUE(FromTorch(w.t().contiguous()).ok());

  absl::StatusOr<Tensor> strided = FromTorch(w.slice(/*dim=*/1, 0, 4, /*step=*/2));
  EXPECT_EQ(strided.status().code(), absl::StatusCode::kInvalidArgument);

  absl::StatusOr<Tensor> shorts = FromTorch(at::zeros({2}, at::kShort));
  EXPECT_EQ(shorts.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(shorts.status().message().find("Short"), std::string::npos) << shorts.status();
  EXPECT_FALSE(FromTorch(at::zeros({2}, at::kComplexFloat)).ok());
  EXPECT_FALSE(FromTorch(at::Tensor()).ok());
  EXPECT_FALSE(ToTorch(Tensor()).ok());
}

TEST(TensorBridgeTest, EmptyTensorsCrossBothWays) {
  absl::StatusOr<Tensor> t = FromTorch(at::zeros({0, 3}));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->shape(), (Shape{0, 3}));
  absl::StatusOr<Tensor> z = Tensor::Zeros({2, 0}, DType::kF32);
  ASSERT_TRUE(z.ok());
  absl::StatusOr<at::Tensor> a = ToTorch(*z);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->numel(), 0);
  EXPECT_EQ(a->sizes(), at::IntArrayRef({2, 0}));
}

}  // namespace
}  // namespace lockstep
