#include "core/status.h"

#include <string>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::Status Check(bool ok) { return ok ? absl::OkStatus() : absl::InternalError("failed"); }

absl::StatusOr<int> Quarter(int x) {
  LOCKSTEP_ASSIGN_OR_RETURN(int half, Half(x));
  LOCKSTEP_ASSIGN_OR_RETURN(half, Half(half));  // Reassign an existing variable.
  return half;
}

absl::Status Twice(bool first, bool second, int* calls) {
  ++*calls;
  LOCKSTEP_RETURN_IF_ERROR(Check(first));
  ++*calls;
  LOCKSTEP_RETURN_IF_ERROR(Check(second));
  ++*calls;
  return absl::OkStatus();
}

TEST(StatusTest, AssignOrReturnPropagatesErrorsAndValues) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Quarter(7).status().message(), "odd");
}

TEST(StatusTest, ReturnIfErrorStopsAtTheFirstError) {
  int calls = 0;
  EXPECT_TRUE(Twice(true, true, &calls).ok());
  EXPECT_EQ(calls, 3);
  calls = 0;
  EXPECT_EQ(Twice(false, true, &calls).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(calls, 1);
  calls = 0;
  EXPECT_FALSE(Twice(true, false, &calls).ok());
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace lockstep
