#include "collectives/fused_all_reduce.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/bucket_assignment.h"
#include "collectives/testing/group.h"
#include "core/kernels.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using Buckets = std::vector<std::vector<size_t>>;

std::vector<BucketItem> Items(std::vector<size_t> bytes) {
  std::vector<BucketItem> items;
  for (size_t b : bytes) items.push_back({b, DType::kF32, Device::Cpu()});
  return items;
}

TEST(BucketAssignmentTest, OneBucketWhenEverythingFits) {
  EXPECT_EQ(AssignBuckets(Items({100, 200, 300}), 1000), (Buckets{{0, 1, 2}}));
  EXPECT_EQ(AssignBuckets(Items({100, 200, 300}), 600), (Buckets{{0, 1, 2}}));  // Exactly the cap.
  EXPECT_TRUE(AssignBuckets({}, 100).empty());
}

TEST(BucketAssignmentTest, ManyBucketsNeverOverTheCap) {
  EXPECT_EQ(AssignBuckets(Items({100, 200, 300, 400, 50}), 400), (Buckets{{0, 1}, {2}, {3}, {4}}));
  EXPECT_EQ(AssignBuckets(Items({10, 10, 10, 10, 10}), 20), (Buckets{{0, 1}, {2, 3}, {4}}));
}

TEST(BucketAssignmentTest, ATensorLargerThanTheCapGetsItsOwnBucket) {
  EXPECT_EQ(AssignBuckets(Items({10, 5000, 10, 10}), 100), (Buckets{{0}, {1}, {2, 3}}));
  EXPECT_EQ(AssignBuckets(Items({5000}), 100), (Buckets{{0}}));
}

TEST(BucketAssignmentTest, DtypesAndDevicesNeverMixAndOrderIsKept) {
  std::vector<BucketItem> items = {
      {100, DType::kF32, Device::Cpu()}, {100, DType::kF16, Device::Cpu()}, {100, DType::kF32, Device::Cpu()},
      {100, DType::kF16, Device::Cpu()}, {100, DType::kF32, Device::Cpu(1)}, {100, DType::kF32, Device::Cpu()},
  };
  EXPECT_EQ(AssignBuckets(items, 200), (Buckets{{0, 2}, {1, 3}, {4}, {5}}));
}

// Results equal one AllReduce per tensor, on 3 ranks. The inputs are small
// integers so every sum is exact: with arbitrary floats, a bucket may take
// another algorithm (ring vs recursive doubling) than the lone tensor would,
// which adds in another order and can differ in the last bit, as in NCCL.
TEST(FusedAllReduceTest, EqualsPerTensorAllReduce) {
  const std::vector<int64_t> sizes = {1, 1000, 7, 300000, 0, 64, 5000};
  for (size_t cap : {size_t{1} << 30, size_t{4096}, size_t{1}}) {
    const auto results = testing::RunThreads(3, [&](Communicator& comm) -> absl::Status {
      std::vector<Tensor> fused_tensors, single_tensors;
      for (size_t k = 0; k < sizes.size(); ++k) {
        const DType dtype = k % 2 == 0 ? DType::kF32 : DType::kBF16;
        Tensor t = *Tensor::Empty({sizes[k]}, DType::kF32);
        for (int64_t i = 0; i < sizes[k]; ++i) t.data<float>()[i] = static_cast<float>((i * 7 + comm.rank() * 3 + k) % 23) - 11;
        Tensor typed = *Tensor::Empty({sizes[k]}, dtype);
        if (dtype == DType::kF32) {
          typed = t;
        } else if (auto s = Cast(t, typed); !s.ok()) {
          return s;
        }
        fused_tensors.push_back(*typed.Clone());
        single_tensors.push_back(*typed.Clone());
      }
      auto fused = FusedAllReduce::Start(comm, fused_tensors, ReduceOp::kSum, cap);
      if (!fused.ok()) return fused.status();
      for (const Tensor& t : single_tensors) {
        if (auto s = comm.AllReduce(t, ReduceOp::kSum)->Wait(); !s.ok()) return s;
      }
      if (auto s = (*fused)->Wait(); !s.ok()) return s;
      if (cap == 1 && (*fused)->buckets().size() != sizes.size()) return absl::InternalError("expected one bucket per tensor");
      for (size_t k = 0; k < sizes.size(); ++k) {
        if (std::memcmp(fused_tensors[k].raw_data(), single_tensors[k].raw_data(), fused_tensors[k].nbytes()) != 0) {
          return absl::InternalError(absl::StrCat("tensor ", k, " differs with cap ", cap));
        }
      }
      return absl::OkStatus();
    });
    for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
  }
}

}  // namespace
}  // namespace lockstep
