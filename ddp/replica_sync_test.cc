// BroadcastFromRankZero coalesces as PyTorch's _broadcast_coalesced: tensors
// of several dtypes and sizes, with bucket caps that put them all in one
// bucket per dtype, one each, or some tensors alone (larger than the cap),
// end equal to rank 0's bytes on every rank, rank 0's untouched. Ranks are
// threads with real TCP connections and processes over shared memory.
#include "ddp/replica_sync.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/testing/group.h"
#include "core/dtype.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

struct Spec {
  DType dtype;
  int64_t numel;
};

// BatchNorm-like buffers (f32 mean and var, i64 count) between parameters of
// other dtypes, one empty and one large.
const std::vector<Spec> kSpecs = {{DType::kF32, 7},   {DType::kF32, 7}, {DType::kI64, 1}, {DType::kF16, 33},
                                  {DType::kF32, 0},   {DType::kU8, 5},  {DType::kF64, 3}, {DType::kF32, 1000},
                                  {DType::kBF16, 12}, {DType::kI64, 1}, {DType::kF32, 2}, {DType::kI32, 9}};

// Rank r's bytes of tensor i: distinct per rank, tensor and byte.
uint8_t ByteOf(int rank, size_t tensor, size_t byte) {
  return static_cast<uint8_t>(rank * 101 + tensor * 13 + byte * 7 + 1);
}

absl::Status CheckBroadcast(Communicator& comm, size_t bucket_bytes) {
  std::vector<Tensor> tensors;
  for (size_t i = 0; i < kSpecs.size(); ++i) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({kSpecs[i].numel}, kSpecs[i].dtype));
    auto* p = static_cast<uint8_t*>(t.raw_data());
    for (size_t b = 0; b < t.nbytes(); ++b) p[b] = ByteOf(comm.rank(), i, b);
    tensors.push_back(t);
  }
  LOCKSTEP_RETURN_IF_ERROR(BroadcastFromRankZero(comm, tensors, bucket_bytes));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto* p = static_cast<const uint8_t*>(tensors[i].raw_data());
    for (size_t b = 0; b < tensors[i].nbytes(); ++b) {
      if (p[b] != ByteOf(0, i, b)) {
        return absl::InternalError(absl::StrCat("cap ", bucket_bytes, ": rank ", comm.rank(), " tensor ", i, " byte ",
                                                b, " is ", p[b], ", rank 0 had ", ByteOf(0, i, b)));
      }
    }
  }
  return absl::OkStatus();
}

// One bucket per dtype; several buckets (the 4000-byte tensor alone); every
// tensor alone.
const std::vector<size_t> kCaps = {kBroadcastBucketBytes, 64, 1};

TEST(BroadcastFromRankZeroTest, EveryRankEndsWithRankZerosBytesOverTcp) {
  for (int ranks : {2, 3}) {
    for (size_t cap : kCaps) {
      const auto results = testing::RunThreads(ranks, [&](Communicator& comm) { return CheckBroadcast(comm, cap); });
      for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << ranks << " ranks: " << s;
    }
  }
}

TEST(BroadcastFromRankZeroTest, EveryRankEndsWithRankZerosBytesOverSharedMemory) {
  const auto results = testing::RunShmProcesses(2, [&](Communicator& comm) -> absl::Status {
    for (size_t cap : kCaps) LOCKSTEP_RETURN_IF_ERROR(CheckBroadcast(comm, cap));
    return absl::OkStatus();
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

TEST(BroadcastFromRankZeroTest, DifferentBufferListsFailTheReceiverNamingTheSizes) {
  // A buffer only rank 1 has: the flat bucket's size differs. Rank 0 (the
  // root) may finish its send; rank 1 fails instead of hanging or taking a
  // short message as its buffers.
  const auto results = testing::RunThreads(2, [&](Communicator& comm) -> absl::Status {
    std::vector<Tensor> tensors;
    for (int i = 0; i < 2 + comm.rank(); ++i) {
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros({4}, DType::kF32));
      tensors.push_back(t);
    }
    return BroadcastFromRankZero(comm, tensors);
  });
  ASSERT_EQ(results.size(), 2u);
  EXPECT_FALSE(results[1].ok());
  EXPECT_NE(results[1].message().find("Broadcast"), std::string::npos) << results[1];
  EXPECT_NE(results[1].message().find("collective mismatch"), std::string::npos) << results[1];
}

}  // namespace
}  // namespace lockstep
