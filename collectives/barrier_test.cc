// Dissemination barrier over the fake transport.
#include "collectives/barrier.h"

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

TEST(BarrierTest, NoRankLeavesBeforeEveryRankArrived) {
  for (const AlgorithmRun& run : StandardRuns()) {
    std::atomic<int> arrived{0};
    auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
      arrived.fetch_add(1);
      LOCKSTEP_RETURN_IF_ERROR(DisseminationBarrier(ctx));
      const int seen = arrived.load();
      if (seen != run.size) return absl::InternalError(absl::StrCat("left the barrier with ", seen, " arrived"));
      return absl::OkStatus();
    });
    for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << Describe(run, 0) << ": " << s;
  }
}

}  // namespace
}  // namespace lockstep
