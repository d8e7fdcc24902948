#include "amp/precision_policy.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

TEST(PrecisionPolicyTest, ParsesTheAcceptedNames) {
  struct Case {
    const char* name;
    DType compute;
    const char* canonical;
    bool scaling;
  };
  for (const Case& c : {Case{"fp32", DType::kF32, "fp32", false}, Case{"f32", DType::kF32, "fp32", false},
                        Case{"fp16", DType::kF16, "fp16", true}, Case{"f16", DType::kF16, "fp16", true},
                        Case{"bf16", DType::kBF16, "bf16", false}}) {
    absl::StatusOr<PrecisionPolicy> p = ParsePrecision(c.name);
    ASSERT_TRUE(p.ok()) << c.name << ": " << p.status();
    EXPECT_EQ(p->compute_dtype, c.compute) << c.name;
    EXPECT_EQ(p->master_dtype, DType::kF32) << c.name;
    EXPECT_EQ(NeedsLossScaling(*p), c.scaling) << c.name;
    EXPECT_EQ(PrecisionName(*p), c.canonical) << c.name;
    // The canonical name parses back to the same policy.
    absl::StatusOr<PrecisionPolicy> again = ParsePrecision(PrecisionName(*p));
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->compute_dtype, p->compute_dtype);
  }
}

TEST(PrecisionPolicyTest, DefaultIsFp32) {
  const PrecisionPolicy p;
  EXPECT_EQ(p.compute_dtype, DType::kF32);
  EXPECT_EQ(p.master_dtype, DType::kF32);
  EXPECT_FALSE(NeedsLossScaling(p));
  EXPECT_EQ(PrecisionName(p), "fp32");
}

TEST(PrecisionPolicyTest, RejectsOtherNamesListingTheAcceptedOnes) {
  for (const char* name : {"", "FP16", "float16", "half", "bfloat16", "fp64", "f64", " fp16", "fp16 ", "int8"}) {
    absl::StatusOr<PrecisionPolicy> p = ParsePrecision(name);
    ASSERT_FALSE(p.ok()) << name;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << name;
    const std::string message(p.status().message());
    EXPECT_THAT(message, HasSubstr("ParsePrecision"));
    EXPECT_THAT(message, HasSubstr("\"" + std::string(name) + "\""));
    EXPECT_THAT(message, HasSubstr("fp32 (or f32), fp16 (or f16), bf16"));
  }
}

TEST(PrecisionPolicyTest, NamesOtherCombinationsByTheirDTypes) {
  PrecisionPolicy p;
  p.compute_dtype = DType::kF64;
  p.master_dtype = DType::kF64;
  EXPECT_EQ(PrecisionName(p), "compute=f64,master=f64");
  EXPECT_FALSE(NeedsLossScaling(p));
  p.compute_dtype = DType::kF16;
  p.master_dtype = DType::kF16;
  EXPECT_EQ(PrecisionName(p), "compute=f16,master=f16");
  EXPECT_TRUE(NeedsLossScaling(p));
}

}  // namespace
}  // namespace lockstep
