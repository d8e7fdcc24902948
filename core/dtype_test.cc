#include "core/dtype.h"

#include "core/reduce_op.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kF64), 8u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kI32), 4u);
  EXPECT_EQ(DTypeSize(DType::kI64), 8u);
  EXPECT_EQ(DTypeSize(DType::kU8), 1u);
  for (DType t : kAllDTypes) {
    EXPECT_EQ(*ParseDType(DTypeName(t)), t);
    EXPECT_TRUE(IsValidDType(static_cast<uint8_t>(t)));
    // The visitor maps each dtype to a C++ type of the right size and back.
    VisitDType(t, [&](auto tag) {
      using T = typename decltype(tag)::type;
      EXPECT_EQ(sizeof(T), DTypeSize(t));
      EXPECT_EQ(DTypeOf<T>::value, t);
    });
  }
  EXPECT_FALSE(IsValidDType(7));
  EXPECT_TRUE(IsFloatingPoint(DType::kBF16));
  EXPECT_FALSE(IsFloatingPoint(DType::kU8));
}

TEST(DTypeTest, ParsesPyTorchNamesAndRejectsOthers) {
  EXPECT_EQ(*ParseDType("float32"), DType::kF32);
  EXPECT_EQ(*ParseDType("BFloat16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("half"), DType::kF16);
  EXPECT_EQ(*ParseDType("long"), DType::kI64);
  const absl::StatusOr<DType> bad = ParseDType("f8");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'f8'"), absl::string_view::npos);
  EXPECT_NE(bad.status().message().find("bf16"), absl::string_view::npos);
}

TEST(ReduceOpTest, NamesRoundTrip) {
  for (ReduceOp op : kAllReduceOps) EXPECT_EQ(*ParseReduceOp(ReduceOpName(op)), op);
  EXPECT_EQ(*ParseReduceOp("avg"), ReduceOp::kAvg);
  EXPECT_FALSE(ParseReduceOp("mean").ok());
  EXPECT_FALSE(IsValidReduceOp(5));
}

}  // namespace
}  // namespace lockstep
