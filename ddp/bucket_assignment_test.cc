// AssignBuckets against c10d's compute_bucket_assignment_by_size: golden
// cases from PyTorch 1.13 (testdata/make_bucket_golden.py), then the rule's
// corners by hand.
#include "ddp/bucket_assignment.h"

#include <algorithm>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace lockstep {
namespace {

using Buckets = std::vector<std::vector<size_t>>;
using Limits = std::vector<size_t>;

// Relative to the runfiles root, where Bazel starts the test (`data` in BUILD).
constexpr char kGolden[] = "ddp/testdata/bucket_golden.json";
constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;

std::vector<BucketItem> Items(std::vector<size_t> bytes, DType dtype = DType::kF32) {
  std::vector<BucketItem> items;
  for (size_t b : bytes) items.push_back({b, dtype, Device::Cpu()});
  return items;
}

TEST(BucketAssignmentGoldenTest, MatchesPyTorch) {
  std::ifstream in(kGolden);
  ASSERT_TRUE(in) << "cannot open " << kGolden;
  const nlohmann::json golden = nlohmann::json::parse(in, /*cb=*/nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(golden.is_discarded()) << kGolden << " is not valid JSON";
  ASSERT_GE(golden["cases"].size(), 15u);
  for (const nlohmann::json& c : golden["cases"]) {
    const std::string name = c["name"].get<std::string>();
    SCOPED_TRACE(name);
    const auto numel = c["numel"].get<std::vector<size_t>>();
    const auto dtypes = c["dtype"].get<std::vector<std::string>>();
    const auto element_size = c["element_size"].get<std::vector<size_t>>();
    ASSERT_EQ(dtypes.size(), numel.size());
    std::vector<BucketItem> items;
    for (size_t i = 0; i < numel.size(); ++i) {
      absl::StatusOr<DType> dtype = ParseDType(dtypes[i]);
      ASSERT_TRUE(dtype.ok()) << dtype.status();
      ASSERT_EQ(DTypeSize(*dtype), element_size[i]);
      items.push_back({numel[i] * element_size[i], *dtype, Device::Cpu()});
    }
    const auto limits = c["limits"].get<Limits>();
    const auto tensor_indices = c["tensor_indices"].get<std::vector<int64_t>>();
    const auto expected_buckets = c["buckets"].get<Buckets>();
    const auto expected_limits = c["size_limits"].get<Limits>();

    absl::StatusOr<BucketAssignment> got = AssignBuckets(items, limits, tensor_indices);
    ASSERT_TRUE(got.ok()) << got.status();
    if (c["order_sensitive"].get<bool>()) {
      EXPECT_EQ(got->buckets, expected_buckets);
      EXPECT_EQ(got->size_limits, expected_limits);
    } else {
      // Several dtypes with tensor_indices: c10d appends its still-open
      // buckets in unordered_map order, which is not part of the rule.
      std::vector<std::pair<std::vector<size_t>, size_t>> want, have;
      for (size_t b = 0; b < expected_buckets.size(); ++b) want.push_back({expected_buckets[b], expected_limits[b]});
      for (size_t b = 0; b < got->buckets.size(); ++b) have.push_back({got->buckets[b], got->size_limits[b]});
      std::sort(want.begin(), want.end());
      std::sort(have.begin(), have.end());
      EXPECT_EQ(have, want);
    }
  }
}

TEST(BucketAssignmentTest, ThreeTensorsOf600KiB) {
  const Limits limits = {kDefaultFirstBucketBytes, 25 * kMiB};
  absl::StatusOr<BucketAssignment> a = AssignBuckets(Items({600 * kKiB, 600 * kKiB, 600 * kKiB}), limits);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->buckets, (Buckets{{0, 1}, {2}}));
  EXPECT_EQ(a->size_limits, (Limits{kMiB, 25 * kMiB}));
}

// The rule lockstep had before closed a bucket BEFORE the tensor that would
// take it past the cap, giving {0}, {1, 2, 3}. c10d adds first and closes once
// the limit is reached, so a bucket may end over its limit.
TEST(BucketAssignmentTest, AddsBeforeClosing) {
  const Limits limits = {100};
  absl::StatusOr<BucketAssignment> a = AssignBuckets(Items({60, 60, 30, 10}), limits);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->buckets, (Buckets{{0, 1}, {2, 3}}));
  EXPECT_EQ(a->size_limits, (Limits{100, 100}));
}

TEST(BucketAssignmentTest, EachKeyWalksTheLimitsOnItsOwn) {
  // f32 closes a 100-byte bucket, then uses 200; f16 still starts at 100.
  const std::vector<BucketItem> items = {
      {100, DType::kF32, Device::Cpu()}, {150, DType::kF32, Device::Cpu()}, {60, DType::kF16, Device::Cpu()},
      {60, DType::kF16, Device::Cpu()},  {60, DType::kF32, Device::Cpu()},  {100, DType::kF32, Device::Cpu(1)},
  };
  const Limits limits = {100, 200};
  absl::StatusOr<BucketAssignment> a = AssignBuckets(items, limits);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->buckets, (Buckets{{0}, {1, 4}, {2, 3}, {5}}));
  EXPECT_EQ(a->size_limits, (Limits{100, 200, 100, 100}));
}

TEST(BucketAssignmentTest, TensorIndicesKeepReadyOrder) {
  // Ready order 3, 2, 1, 0: buckets hold original indices, not sorted.
  const Limits limits = {100};
  const std::vector<int64_t> ready = {3, 2, 1, 0};
  absl::StatusOr<BucketAssignment> a = AssignBuckets(Items({50, 50, 50, 50}), limits, ready);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->buckets, (Buckets{{3, 2}, {1, 0}}));
}

TEST(BucketAssignmentTest, LeftoversFollowOpeningOrderWithTensorIndices) {
  // c10d would use unordered_map order here; lockstep: the order opened.
  const std::vector<BucketItem> items = {
      {10, DType::kF16, Device::Cpu()}, {10, DType::kF32, Device::Cpu()}, {10, DType::kF64, Device::Cpu()}};
  const Limits limits = {100};
  const std::vector<int64_t> ready = {2, 0, 1};
  absl::StatusOr<BucketAssignment> a = AssignBuckets(items, limits, ready);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->buckets, (Buckets{{2}, {0}, {1}}));
}

TEST(BucketAssignmentTest, NoItemsNoBuckets) {
  const Limits limits = {100};
  absl::StatusOr<BucketAssignment> a = AssignBuckets({}, limits);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->buckets.empty());
  EXPECT_TRUE(a->size_limits.empty());
}

TEST(BucketAssignmentTest, InvalidArguments) {
  const std::vector<BucketItem> items = Items({10, 20});
  const Limits none, zero = {kMiB, 0}, ok = {kMiB};
  EXPECT_EQ(AssignBuckets(items, none).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AssignBuckets(items, zero).status().code(), absl::StatusCode::kInvalidArgument);
  for (const std::vector<int64_t>& bad : std::vector<std::vector<int64_t>>{{0}, {0, 1, 2}, {0, 2}, {1, 1}, {-1, 0}}) {
    absl::StatusOr<BucketAssignment> a = AssignBuckets(items, ok, bad);
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(a.status().message().find("tensor_indices"), std::string::npos) << a.status();
  }
  EXPECT_NE(AssignBuckets(items, none).status().message().find("size_limits"), absl::string_view::npos);
}

}  // namespace
}  // namespace lockstep
