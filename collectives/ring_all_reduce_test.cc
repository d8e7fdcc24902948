// Ring all-reduce over the fake transport: world sizes 1-5, counts that do
// and do not divide by the world size, tiny connection buffers and segments.
#include "collectives/ring_all_reduce.h"

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

TEST(RingAllReduceTest, SumsAndMaxesExactlyOnEveryRank) {
  for (const AlgorithmRun& run : StandardRuns()) {
    for (int64_t count : {int64_t{run.size}, int64_t{7} * run.size + 3, int64_t{10007}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
          Tensor t = RankInput(ctx.rank(), count);
          LOCKSTEP_RETURN_IF_ERROR(RingAllReduce(ctx, t, op));
          return CheckValues(t, [&](int64_t i) {
            return op == ReduceOp::kSum ? SumOver(run.size, i) : InputValue(run.size - 1, i);
          });
        });
        for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << Describe(run, count) << ": " << s;
      }
    }
  }
}

}  // namespace
}  // namespace lockstep
