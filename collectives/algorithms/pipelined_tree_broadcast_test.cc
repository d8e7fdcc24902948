// The pipelined tree broadcast over the fake transport at every world size
// from 1 to 17, from three roots, in one chunk, a few and one per element;
// its steps and the bytes each rank sends.
#include "collectives/algorithms/pipelined_tree_broadcast.h"

#include <vector>

#include "collectives/algorithms/algorithm.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using namespace testing;  // The algorithm test helpers.

TEST(PipelinedTreeBroadcastTest, EveryRankGetsTheRootsBufferAtEveryWorldSize) {
  for (int n = 1; n <= 17; ++n) {
    AlgorithmRun run;
    run.size = n;
    run.capacity_bytes = n % 3 == 0 ? 100 : 64 << 10;  // Some worlds block every transfer.
    for (int root : {0, n / 2, n - 1}) {
      for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{1031}}) {
        for (int chunks : {1, 3, 2000}) {
          auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
            Tensor t = ctx.rank() == root ? RankInput(root, count) : *Tensor::Zeros({count}, DType::kF32);
            LOCKSTEP_RETURN_IF_ERROR(PipelinedTreeBroadcast(ctx, t, root, chunks));
            return CheckValues(t, [&](int64_t i) { return InputValue(root, i); });
          });
          for (const absl::Status& s : results) {
            ASSERT_TRUE(s.ok()) << Describe(run, count) << ", root " << root << ", " << chunks << " chunks: " << s;
          }
        }
      }
    }
  }
}

TEST(PipelinedTreeBroadcastTest, EachInteriorRankSendsTheBufferToEachChildOnce) {
  constexpr int64_t kCount = 1000;
  constexpr int kChunks = 8;
  for (int n : {2, 5, 8, 13}) {
    AlgorithmRun run;
    run.size = n;
    std::vector<uint64_t> sent(n);
    std::vector<uint32_t> steps(n);
    auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
      Tensor t = RankInput(ctx.rank(), kCount);
      LOCKSTEP_RETURN_IF_ERROR(PipelinedTreeBroadcast(ctx, t, 1 % n, kChunks));
      for (uint64_t b : ctx.transport.Traffic().bytes_sent) sent[ctx.rank()] += b;
      steps[ctx.rank()] = ctx.next_tag;
      return absl::OkStatus();
    });
    for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << n << " ranks: " << s;
    int height = 0;
    while ((2 << height) <= n) ++height;
    for (int r = 0; r < n; ++r) {
      const BinaryTree tree(n, r, 1 % n);
      EXPECT_EQ(sent[r], tree.num_children * kCount * sizeof(float)) << n << " ranks, rank " << r;
      EXPECT_EQ(steps[r], static_cast<uint32_t>(height + kChunks - 1)) << n << " ranks, rank " << r;
    }
  }
}

}  // namespace
}  // namespace lockstep
