// Reduce-scatter by recursive halving over the fake transport at every
// world size from 1 to 17: exact sums, maxes and averages in each rank's
// chunk, the input left as it was, and the bytes each rank sends.
#include "collectives/algorithms/recursive_halving_reduce_scatter.h"

#include <vector>

#include "collectives/algorithms/algorithm.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using namespace testing;  // The algorithm test helpers.

TEST(RecursiveHalvingReduceScatterTest, ReducesEachRanksChunkAtEveryWorldSize) {
  for (int n = 1; n <= 17; ++n) {
    AlgorithmRun run;
    run.size = n;
    run.capacity_bytes = n % 3 == 0 ? 100 : 64 << 10;
    for (int64_t count : {int64_t{n}, int64_t{7} * n + 3, int64_t{1031}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
        auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
          const Tensor input = RankInput(ctx.rank(), count);
          Tensor buffer = *Tensor::Empty({count}, DType::kF32);
          LOCKSTEP_RETURN_IF_ERROR(RecursiveHalvingReduceScatter(ctx, input, buffer, op));
          LOCKSTEP_RETURN_IF_ERROR(CheckValues(input, [&](int64_t i) { return InputValue(ctx.rank(), i); }));
          const Chunk own = ChunkOf(count, n, ctx.rank());
          LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine, buffer.Flat(own.offset, own.count));
          return CheckValues(mine, [&](int64_t j) {
            const int64_t i = own.offset + j;
            if (op == ReduceOp::kMax) return InputValue(n - 1, i);
            const float sum = SumOver(n, i);
            return op == ReduceOp::kSum ? sum : sum / static_cast<float>(n);
          });
        });
        for (const absl::Status& s : results) {
          ASSERT_TRUE(s.ok()) << Describe(run, count) << ", op " << static_cast<int>(op) << ": " << s;
        }
      }
    }
  }
}

TEST(RecursiveHalvingReduceScatterTest, SendsTheRingsBytesAtAPowerOfTwo) {
  constexpr int64_t kCount = 4096;
  for (int n : {2, 4, 8}) {
    AlgorithmRun run;
    run.size = n;
    std::vector<uint64_t> sent(n);
    auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
      const Tensor input = RankInput(ctx.rank(), kCount);
      Tensor buffer = *Tensor::Empty({kCount}, DType::kF32);
      LOCKSTEP_RETURN_IF_ERROR(RecursiveHalvingReduceScatter(ctx, input, buffer, ReduceOp::kSum));
      for (uint64_t b : ctx.transport.Traffic().bytes_sent) sent[ctx.rank()] += b;
      return absl::OkStatus();
    });
    for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
    for (int r = 0; r < n; ++r) EXPECT_EQ(sent[r], kCount * sizeof(float) * (n - 1) / n) << n << " ranks, rank " << r;
  }
}

}  // namespace
}  // namespace lockstep
