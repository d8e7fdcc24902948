// Direct gather over the fake transport.
#include "collectives/gather.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "collectives/algorithm.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using testing::AlgorithmRun;
using testing::CheckValues;
using testing::InputValue;
using testing::RankInput;
using testing::RunAlgorithm;
using testing::StandardRuns;

[[maybe_unused]] std::string Describe(const AlgorithmRun& run, int64_t count) {
  return absl::StrCat(run.size, " ranks, ", count, " elements, capacity ", run.capacity_bytes, ", segment ",
                      run.algorithms.segment_bytes);
}

// Sum over ranks of InputValue(r, i).
[[maybe_unused]] float SumOver(int n, int64_t i) {
  float s = 0;
  for (int r = 0; r < n; ++r) s += InputValue(r, i);
  return s;
}

TEST(GatherTest, TheRootGetsEveryRanksBlock) {
  for (const AlgorithmRun& run : StandardRuns()) {
    for (int root : {0, run.size - 1}) {
      constexpr int64_t kCount = 1001;
      auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
        Tensor mine = RankInput(ctx.rank(), kCount);
        if (ctx.rank() != root) return DirectGather(ctx, mine, Tensor(), root);
        Tensor slots = *Tensor::Zeros({kCount * run.size}, DType::kF32);
        LOCKSTEP_RETURN_IF_ERROR(DirectGather(ctx, mine, slots, root));
        return CheckValues(slots, [&](int64_t i) { return InputValue(static_cast<int>(i / kCount), i % kCount); });
      });
      for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << Describe(run, kCount) << ", root " << root << ": " << s;
    }
  }
}

}  // namespace
}  // namespace lockstep
