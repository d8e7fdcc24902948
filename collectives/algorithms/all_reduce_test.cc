// The all-reduce entry point: the algorithm follows small_message_bytes
// (seen in the bytes each rank sends), and both give exact sums.
#include "collectives/algorithms/all_reduce.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "collectives/algorithms/algorithm.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using namespace testing;  // The algorithm test helpers.

TEST(AllReduceTest, ChoosesByMessageSizeAndIsExact) {
  // 4 ranks, 16000 bytes: the ring sends 2(n-1)/n of the buffer per rank
  // (24000 bytes), recursive doubling log2(n) whole buffers (32000).
  constexpr int64_t kCount = 4000;
  for (size_t small : {size_t{0}, size_t{1} << 20}) {
    AlgorithmRun run;
    run.size = 4;
    run.algorithms.small_message_bytes = small;
    auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
      Tensor t = RankInput(ctx.rank(), kCount);
      LOCKSTEP_RETURN_IF_ERROR(AllReduce(ctx, t, ReduceOp::kSum));
      LOCKSTEP_RETURN_IF_ERROR(CheckValues(t, [&](int64_t i) { return SumOver(4, i); }));
      uint64_t sent = 0;
      for (uint64_t b : ctx.transport.Traffic().bytes_sent) sent += b;
      const uint64_t want = small == 0 ? 24000 : 32000;
      if (sent != want) {
        return absl::InternalError(absl::StrCat("sent ", sent, " bytes, expected ", want, " for ",
                                                small == 0 ? "the ring" : "recursive doubling"));
      }
      return absl::OkStatus();
    });
    for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
  }
}

TEST(AllReduceTest, FewerElementsThanRanksTakesRecursiveDoubling) {
  AlgorithmRun run;
  run.size = 5;
  run.algorithms.small_message_bytes = 0;  // Would pick the ring by size.
  auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
    Tensor t = RankInput(ctx.rank(), 3);
    LOCKSTEP_RETURN_IF_ERROR(AllReduce(ctx, t, ReduceOp::kSum));
    return CheckValues(t, [&](int64_t i) { return SumOver(5, i); });
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace lockstep
