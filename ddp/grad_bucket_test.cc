#include "ddp/grad_bucket.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

Tensor Floats(std::vector<float> values, Shape shape = {}) { return *Tensor::FromVector<float>(values, shape); }

TEST(GradBucketTest, LayoutIndicesAndFlags) {
  const std::vector<Tensor> members = {Floats({1, 2, 3, 4, 5, 6}, {2, 3}), Floats({7}), Floats({8, 9})};
  absl::StatusOr<GradBucket> bucket = GradBucket::Create(4, /*is_last=*/true, members, {9, 2, 5});
  ASSERT_TRUE(bucket.ok()) << bucket.status();
  EXPECT_EQ(bucket->index(), 4u);
  EXPECT_TRUE(bucket->is_last());
  EXPECT_EQ(bucket->size(), 3u);
  EXPECT_EQ(bucket->dtype(), DType::kF32);
  EXPECT_EQ(bucket->device(), Device::Cpu());
  EXPECT_EQ(bucket->indices(), (std::vector<size_t>{9, 2, 5}));
  EXPECT_EQ(bucket->offsets(), (std::vector<int64_t>{0, 6, 7}));
  EXPECT_EQ(bucket->lengths(), (std::vector<int64_t>{6, 1, 2}));
  EXPECT_EQ(bucket->buffer().shape(), (Shape{9}));
  EXPECT_EQ(bucket->views()[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(bucket->views()[2].shape(), (Shape{2}));
  // Allocated zeroed: a member never copied in reduces as zeros.
  EXPECT_EQ(*bucket->buffer().ToVector<float>(), std::vector<float>(9, 0.0f));
}

TEST(GradBucketTest, ViewsAliasTheBuffer) {
  const std::vector<Tensor> members = {Floats({0, 0}), Floats({0, 0, 0})};
  absl::StatusOr<GradBucket> bucket = GradBucket::Create(0, false, members, {0, 1});
  ASSERT_TRUE(bucket.ok()) << bucket.status();
  for (const Tensor& view : bucket->views()) EXPECT_TRUE(view.SharesStorageWith(bucket->buffer()));
  EXPECT_FALSE(bucket->views()[0].Overlaps(bucket->views()[1]));
  EXPECT_FALSE(bucket->views()[0].SharesStorageWith(members[0]));  // A new buffer, not the members.

  bucket->views()[1].data<float>()[2] = 5;          // Through a view...
  EXPECT_EQ(bucket->buffer().data<float>()[4], 5);  // ...into the buffer...
  bucket->buffer().data<float>()[0] = 7;
  EXPECT_EQ(bucket->views()[0].data<float>()[0], 7);  // ...and back.
}

TEST(GradBucketTest, CopyInAndOut) {
  const std::vector<Tensor> members = {Floats({1, 2}), Floats({3, 4, 5, 6}, {2, 2})};
  absl::StatusOr<GradBucket> bucket = GradBucket::Create(0, false, members, {0, 1});
  ASSERT_TRUE(bucket.ok()) << bucket.status();

  ASSERT_TRUE(bucket->CopyInAll().ok());
  EXPECT_EQ(*bucket->buffer().ToVector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));

  // Any shape with the right number of elements: a 1-D source for a [2, 2] member.
  ASSERT_TRUE(bucket->CopyIn(1, Floats({30, 40, 50, 60})).ok());
  EXPECT_EQ(*bucket->buffer().ToVector<float>(), (std::vector<float>{1, 2, 30, 40, 50, 60}));

  // A "reduction" in place, then unpack into the members.
  float* p = bucket->buffer().data<float>();
  for (int i = 0; i < 6; ++i) p[i] *= 2;
  ASSERT_TRUE(bucket->CopyOutAll().ok());
  EXPECT_EQ(*members[0].ToVector<float>(), (std::vector<float>{2, 4}));
  EXPECT_EQ(*members[1].ToVector<float>(), (std::vector<float>{60, 80, 100, 120}));

  const Tensor out = Floats({0, 0});
  ASSERT_TRUE(bucket->CopyOut(0, out).ok());
  EXPECT_EQ(*out.ToVector<float>(), (std::vector<float>{2, 4}));
}

TEST(GradBucketTest, CopyErrorsNameTheMember) {
  absl::StatusOr<GradBucket> bucket = GradBucket::Create(3, false, {Floats({1, 2})}, {0});
  ASSERT_TRUE(bucket.ok()) << bucket.status();
  absl::Status s = bucket->CopyIn(0, Floats({1, 2, 3}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("GradBucket::CopyIn(bucket 3, member 0)"), absl::string_view::npos) << s;
  s = bucket->CopyOut(0, *Tensor::Zeros({2}, DType::kF64));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bucket->CopyIn(1, Floats({1})).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(bucket->CopyOut(1, Floats({1})).code(), absl::StatusCode::kOutOfRange);
}

TEST(GradBucketTest, MixedDtypeIsAnErrorNamingTheTensor) {
  const std::vector<Tensor> members = {Floats({1}), Floats({2}), *Tensor::Zeros({3}, DType::kF16),
                                       *Tensor::Zeros({3}, DType::kF64)};
  absl::StatusOr<GradBucket> bucket = GradBucket::Create(1, false, members, {10, 11, 12, 13});
  ASSERT_FALSE(bucket.ok());
  EXPECT_EQ(bucket.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(bucket.status().message());
  EXPECT_NE(message.find("member 2 (tensor 12)"), std::string::npos) << message;
  EXPECT_NE(message.find("f16"), std::string::npos) << message;
  EXPECT_EQ(message.find("tensor 13"), std::string::npos) << message;  // The first mismatch only.
}

TEST(GradBucketTest, MixedDeviceIsAnError) {
  const std::vector<Tensor> members = {Floats({1}), *Tensor::Zeros({1}, DType::kF32, Device::Cpu(1))};
  absl::StatusOr<GradBucket> bucket = GradBucket::Create(0, false, members, {0, 1});
  ASSERT_FALSE(bucket.ok());
  EXPECT_NE(bucket.status().message().find("cpu:1"), absl::string_view::npos) << bucket.status();
}

TEST(GradBucketTest, BadArguments) {
  EXPECT_EQ(GradBucket::Create(0, false, {}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GradBucket::Create(0, false, {Floats({1})}, {0, 1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GradBucket::Create(0, false, {Floats({1}), Tensor()}, {0, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GradBucketTest, EmptyMembersTakeNoSpace) {
  const std::vector<Tensor> members = {*Tensor::Zeros({0}, DType::kF32), Floats({1, 2})};
  absl::StatusOr<GradBucket> bucket = GradBucket::Create(0, false, members, {0, 1});
  ASSERT_TRUE(bucket.ok()) << bucket.status();
  EXPECT_EQ(bucket->offsets(), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(bucket->buffer().numel(), 2);
  ASSERT_TRUE(bucket->CopyInAll().ok());
  EXPECT_EQ(*bucket->buffer().ToVector<float>(), (std::vector<float>{1, 2}));
}

}  // namespace
}  // namespace lockstep
