// Dissemination barrier over the fake transport.
#include "collectives/algorithms/barrier.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "collectives/algorithms/algorithm.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using namespace testing;  // The algorithm test helpers.

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
