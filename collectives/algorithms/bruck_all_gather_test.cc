// Bruck's all-gather over the fake transport at every world size from 1 to
// 17: even chunks, uneven and empty blocks, and the bytes each rank sends.
#include "collectives/algorithms/bruck_all_gather.h"

#include <vector>

#include "collectives/algorithms/algorithm.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using namespace testing;  // The algorithm test helpers.

// Element i of the gathered buffer: its owner's input at i.
Tensor OwnBlockOnly(int rank, int64_t count, absl::Span<const Chunk> blocks) {
  Tensor t = *Tensor::Empty({count}, DType::kF32);
  for (int64_t i = 0; i < count; ++i) t.data<float>()[i] = BlockOwning(blocks, i) == rank ? InputValue(rank, i) : -1;
  return t;
}

TEST(BruckAllGatherTest, GathersEveryBlockAtEveryWorldSize) {
  for (int n = 1; n <= 17; ++n) {
    AlgorithmRun run;
    run.size = n;
    run.capacity_bytes = n % 3 == 0 ? 100 : 64 << 10;
    for (int64_t count : {int64_t{n}, int64_t{5} * n + 2, int64_t{1031}}) {
      std::vector<Chunk> blocks;
      for (int i = 0; i < n; ++i) blocks.push_back(ChunkOf(count, n, i));
      auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
        Tensor t = OwnBlockOnly(ctx.rank(), count, blocks);
        LOCKSTEP_RETURN_IF_ERROR(BruckAllGather(ctx, t));
        return CheckValues(t, [&](int64_t i) { return InputValue(BlockOwning(blocks, i), i); });
      });
      for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << Describe(run, count) << ": " << s;
    }
  }
}

TEST(BruckAllGatherTest, UnevenAndEmptyBlocks) {
  for (int n = 1; n <= 17; ++n) {
    AlgorithmRun run;
    run.size = n;
    const std::vector<int64_t> counts = UnevenCounts(n, 7);
    const std::vector<Chunk> blocks = BlocksOf(counts);
    const int64_t total = TotalOf(blocks);
    auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
      Tensor t = OwnBlockOnly(ctx.rank(), total, blocks);
      LOCKSTEP_RETURN_IF_ERROR(BruckAllGatherV(ctx, t, blocks));
      return CheckValues(t, [&](int64_t i) { return InputValue(BlockOwning(blocks, i), i); });
    });
    for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << n << " ranks: " << s;
  }
}

TEST(BruckAllGatherTest, SendsEveryOtherBlockOnceInLogarithmicSteps) {
  // Each rank sends (n-1)/n of the buffer, as the ring, whatever n.
  constexpr int64_t kPerRank = 100;
  for (int n : {2, 5, 8, 13}) {
    AlgorithmRun run;
    run.size = n;
    std::vector<uint64_t> sent(n);
    std::vector<Chunk> blocks;
    for (int i = 0; i < n; ++i) blocks.push_back(Chunk{i * kPerRank, kPerRank});
    auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
      Tensor t = OwnBlockOnly(ctx.rank(), n * kPerRank, blocks);
      LOCKSTEP_RETURN_IF_ERROR(BruckAllGather(ctx, t));
      for (uint64_t b : ctx.transport.Traffic().bytes_sent) sent[ctx.rank()] += b;
      // ceil(log2 n) steps, one tag each.
      int steps = 0;
      while ((1 << steps) < n) ++steps;
      if (ctx.next_tag != static_cast<uint32_t>(steps)) return absl::InternalError("wrong number of steps");
      return absl::OkStatus();
    });
    for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << n << " ranks: " << s;
    for (int r = 0; r < n; ++r) EXPECT_EQ(sent[r], (n - 1) * kPerRank * sizeof(float)) << n << " ranks, rank " << r;
  }
}

}  // namespace
}  // namespace lockstep
