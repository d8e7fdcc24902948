#include "ddp/fused_all_reduce.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/testing/group.h"
#include "core/kernels.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

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
        for (int64_t i = 0; i < sizes[k]; ++i)
          t.data<float>()[i] = static_cast<float>((i * 7 + comm.rank() * 3 + k) % 23) - 11;
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
      // With a 1-byte cap every bucket closes at its first non-empty tensor
      // (an empty one rides along with the next tensor of its dtype, as in c10d).
      if (cap == 1) {
        for (const std::vector<size_t>& bucket : (*fused)->buckets()) {
          size_t non_empty = 0;
          for (size_t k : bucket) non_empty += sizes[k] > 0;
          if (non_empty != 1) return absl::InternalError("expected one non-empty tensor per bucket");
        }
      }
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
