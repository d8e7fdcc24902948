// Binomial broadcast over the fake transport, from the first and last rank.
#include "collectives/algorithms/broadcast.h"

#include <atomic>

#include "collectives/algorithms/algorithm.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using namespace testing;  // The algorithm test helpers.

TEST(BroadcastTest, EveryRankGetsTheRootsData) {
  for (const AlgorithmRun& run : StandardRuns()) {
    for (int root : {0, run.size - 1}) {
      for (int64_t count : {int64_t{1}, int64_t{10007}}) {
        auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
          Tensor t = ctx.rank() == root ? RankInput(root, count) : *Tensor::Zeros({count}, DType::kF32);
          LOCKSTEP_RETURN_IF_ERROR(BinomialBroadcast(ctx, t, root));
          return CheckValues(t, [&](int64_t i) { return InputValue(root, i); });
        });
        for (const absl::Status& s : results)
          ASSERT_TRUE(s.ok()) << Describe(run, count) << ", root " << root << ": " << s;
      }
    }
  }
}

}  // namespace
}  // namespace lockstep
