// The pipelined tree reduce over the fake transport at every world size
// from 1 to 17, from three roots: exact sums, maxes and averages at the
// root, out of place (the input untouched) and in place; the bytes each
// rank sends.
#include "collectives/algorithms/pipelined_tree_reduce.h"

#include <vector>

#include "collectives/algorithms/algorithm.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using namespace testing;  // The algorithm test helpers.

TEST(PipelinedTreeReduceTest, TheRootGetsTheResultAndInputsAreUntouched) {
  for (int n = 1; n <= 17; ++n) {
    AlgorithmRun run;
    run.size = n;
    run.capacity_bytes = n % 3 == 0 ? 100 : 64 << 10;
    for (int root : {0, n / 2, n - 1}) {
      for (int64_t count : {int64_t{1}, int64_t{1031}}) {
        for (int chunks : {1, 5}) {
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
            auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
              Tensor input = RankInput(ctx.rank(), count);
              Tensor output = ctx.rank() == root ? *Tensor::Zeros({count}, DType::kF32) : Tensor();
              LOCKSTEP_RETURN_IF_ERROR(PipelinedTreeReduce(ctx, input, output, op, root, chunks));
              LOCKSTEP_RETURN_IF_ERROR(CheckValues(input, [&](int64_t i) { return InputValue(ctx.rank(), i); }));
              if (ctx.rank() != root) return absl::OkStatus();
              return CheckValues(output, [&](int64_t i) { return ReducedValue(op, n, i); });
            });
            for (const absl::Status& s : results) {
              ASSERT_TRUE(s.ok()) << Describe(run, count) << ", root " << root << ", " << chunks << " chunks, op "
                                  << static_cast<int>(op) << ": " << s;
            }
          }
        }
      }
    }
  }
}

TEST(PipelinedTreeReduceTest, InPlace) {
  for (int n = 1; n <= 17; ++n) {
    AlgorithmRun run;
    run.size = n;
    constexpr int64_t kCount = 999;
    auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
      Tensor t = RankInput(ctx.rank(), kCount);
      LOCKSTEP_RETURN_IF_ERROR(PipelinedTreeReduce(ctx, t, t, ReduceOp::kSum, n - 1, 4));
      if (ctx.rank() != n - 1) return absl::OkStatus();
      return CheckValues(t, [&](int64_t i) { return SumOver(n, i); });
    });
    for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << n << " ranks: " << s;
  }
}

TEST(PipelinedTreeReduceTest, EachRankSendsTheBufferToItsParentOnce) {
  constexpr int64_t kCount = 1000;
  for (int n : {2, 5, 8, 13}) {
    AlgorithmRun run;
    run.size = n;
    std::vector<uint64_t> sent(n);
    auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
      Tensor input = RankInput(ctx.rank(), kCount);
      Tensor output = *Tensor::Zeros({kCount}, DType::kF32);
      LOCKSTEP_RETURN_IF_ERROR(PipelinedTreeReduce(ctx, input, output, ReduceOp::kSum, 0, 8));
      for (uint64_t b : ctx.transport.Traffic().bytes_sent) sent[ctx.rank()] += b;
      return absl::OkStatus();
    });
    for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << n << " ranks: " << s;
    for (int r = 0; r < n; ++r) EXPECT_EQ(sent[r], r == 0 ? 0 : kCount * sizeof(float)) << n << " ranks, rank " << r;
  }
}

TEST(PipelinedTreeReduceTest, TheRootWithoutAnOutputIsNamed) {
  AlgorithmRun run;
  run.size = 1;
  auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
    return PipelinedTreeReduce(ctx, RankInput(0, 4), Tensor(), ReduceOp::kSum, 0, 1);
  });
  EXPECT_EQ(results[0].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(results[0].message().find("root needs an output"), std::string::npos) << results[0];
}

}  // namespace
}  // namespace lockstep
