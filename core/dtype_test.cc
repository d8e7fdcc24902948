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
  EXPECT_EQ(DTypeSize(DType::kI8), 1u);
  EXPECT_EQ(DTypeSize(DType::kBool), 1u);
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
  EXPECT_FALSE(IsValidDType(9));
  EXPECT_TRUE(IsFloatingPoint(DType::kBF16));
  EXPECT_FALSE(IsFloatingPoint(DType::kU8));
  for (DType t : kAllDTypes) EXPECT_NE(IsFloatingPoint(t), IsIntegral(t)) << DTypeName(t);
}

TEST(DTypeTest, ParsesPyTorchNamesAndRejectsOthers) {
  EXPECT_EQ(*ParseDType("float32"), DType::kF32);
  EXPECT_EQ(*ParseDType("BFloat16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("half"), DType::kF16);
  EXPECT_EQ(*ParseDType("long"), DType::kI64);
  EXPECT_EQ(*ParseDType("int8"), DType::kI8);
  EXPECT_EQ(*ParseDType("bool"), DType::kBool);
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
  EXPECT_EQ(*ParseReduceOp("bxor"), ReduceOp::kBxor);
  // c10d's ReduceOp numbering (SUM 0 ... BXOR 7): the torch backend maps 1:1.
  EXPECT_EQ(static_cast<int>(ReduceOp::kBand), 5);
  EXPECT_EQ(static_cast<int>(ReduceOp::kBxor), 7);
  EXPECT_TRUE(IsBitwise(ReduceOp::kBor));
  EXPECT_FALSE(IsBitwise(ReduceOp::kMax));
  EXPECT_FALSE(IsValidReduceOp(8));
}

}  // namespace
}  // namespace lockstep
