// Pairwise all-to-all over the fake transport: uneven and empty blocks,
// small (one window) and large (windows of steps), every world size; the
// choice between it and Bruck's (AllToAll, UseBruckAllToAll).
#include "collectives/algorithms/all_to_all.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/algorithms/algorithm.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using namespace testing;  // The algorithm test helpers.

// Elements rank `from` sends to rank `to`: uneven, some empty.
int64_t CountOf(int from, int to, int64_t scale) { return ((from * 3 + to * 5) % 7) * scale; }

// Element k of the block `from` sends to `to`: exact in f32.
float ValueOf(int from, int to, int64_t k) { return static_cast<float>(from * 1000 + to * 100 + k % 97); }

TEST(AllToAllTest, EveryRankGetsItsBlockFromEveryRank) {
  for (const AlgorithmRun& run : StandardRuns()) {
    for (int64_t scale : {int64_t{0}, int64_t{1}, int64_t{3001}}) {
      auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
        const int n = ctx.size(), r = ctx.rank();
        std::vector<int64_t> send_counts, recv_counts;
        for (int j = 0; j < n; ++j) {
          send_counts.push_back(CountOf(r, j, scale));
          recv_counts.push_back(CountOf(j, r, scale));
        }
        const std::vector<Chunk> send_blocks = BlocksOf(send_counts), recv_blocks = BlocksOf(recv_counts);
        Tensor input = *Tensor::Empty({TotalOf(send_blocks)}, DType::kF32);
        for (int j = 0; j < n; ++j) {
          for (int64_t k = 0; k < send_blocks[j].count; ++k) {
            input.data<float>()[send_blocks[j].offset + k] = ValueOf(r, j, k);
          }
        }
        Tensor output = *Tensor::Zeros({TotalOf(recv_blocks)}, DType::kF32);
        LOCKSTEP_RETURN_IF_ERROR(PairwiseAllToAll(ctx, input, send_blocks, output, recv_blocks));
        return CheckValues(output, [&](int64_t i) {
          int from = 0;
          while (i >= recv_blocks[from].offset + recv_blocks[from].count) ++from;
          return ValueOf(from, r, i - recv_blocks[from].offset);
        });
      });
      for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << Describe(run, scale) << ": " << s;
    }
  }
}

TEST(AllToAllTest, CountsThatDisagreeFailNamingBothSizes) {
  AlgorithmRun run;
  run.size = 2;
  auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
    // Rank 0 sends 3 elements to rank 1, which expects 5.
    const std::vector<int64_t> send = {1, 3}, recv = {ctx.rank() == 1 ? 5 : 1, 3};
    const std::vector<Chunk> sb = BlocksOf(send), rb = BlocksOf(recv);
    Tensor input = *Tensor::Zeros({TotalOf(sb)}, DType::kF32);
    Tensor output = *Tensor::Zeros({TotalOf(rb)}, DType::kF32);
    absl::Status s = PairwiseAllToAll(ctx, input, sb, output, rb);
    if (!s.ok()) ctx.transport.Abort(s.message());  // As the Communicator does: the peer fails at once.
    return s;
  });
  ASSERT_FALSE(results[1].ok());
  EXPECT_NE(results[1].message().find("20"), std::string::npos) << results[1];
  EXPECT_NE(results[1].message().find("12"), std::string::npos) << results[1];
}

TEST(AllToAllTest, BruckOnlyForEvenSmallBlocksWhereTheModelSaysSo) {
  const LinkConstants tcp = LinkConstantsFor("tcp");
  constexpr size_t kSmall = 256 << 10;
  // 64 ranks, 64-byte blocks: 126 messages' overhead against 12.
  EXPECT_TRUE(UseBruckAllToAll(AllReduceAlgorithm::kAuto, tcp, 64, 64, 8, 1, kSmall));
  // Large blocks: Bruck sends each up to log2 p times.
  EXPECT_FALSE(UseBruckAllToAll(AllReduceAlgorithm::kAuto, tcp, 64 << 10, 64, 8, 1, kSmall));
  EXPECT_FALSE(UseBruckAllToAll(AllReduceAlgorithm::kAuto, tcp, 1 << 20, 1024, 1, 1, kSmall));
  // 64 ranks on 2 cores (the scale lab's 8 x 8): each core spends 32
  // ranks' message overheads, and Bruck's fewer messages win up to 4 KiB
  // blocks (measured there: 256 KiB a rank, 27.5 ms against 190 ms).
  EXPECT_TRUE(UseBruckAllToAll(AllReduceAlgorithm::kAuto, tcp, 4096, 64, 8, 32, kSmall));
  EXPECT_FALSE(UseBruckAllToAll(AllReduceAlgorithm::kAuto, tcp, 64 << 10, 64, 8, 32, kSmall));
  // Few ranks: the pairwise exchange's one round.
  EXPECT_FALSE(UseBruckAllToAll(AllReduceAlgorithm::kAuto, tcp, 64, 3, 1, 1, kSmall));
  EXPECT_FALSE(UseBruckAllToAll(AllReduceAlgorithm::kTree, tcp, 64, 64, 8, 1, kSmall));
  EXPECT_TRUE(UseBruckAllToAll(AllReduceAlgorithm::kRabenseifner, tcp, 1 << 20, 5, 1, 1, kSmall));

  // Forced Bruck at 5 ranks: the even form runs it (3 steps), the V form
  // the pairwise exchange (one window, 1 step), both exact.
  for (bool even : {true, false}) {
    AlgorithmRun run;
    run.size = 5;
    run.algorithms.all_reduce = AllReduceAlgorithm::kRecursiveDoubling;
    constexpr int64_t kBlock = 7;
    auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
      const int n = ctx.size(), r = ctx.rank();
      const std::vector<int64_t> counts(n, kBlock);
      const std::vector<Chunk> blocks = BlocksOf(counts);
      Tensor input = *Tensor::Empty({n * kBlock}, DType::kF32);
      for (int j = 0; j < n; ++j) {
        for (int64_t k = 0; k < kBlock; ++k) input.data<float>()[j * kBlock + k] = ValueOf(r, j, k);
      }
      Tensor output = *Tensor::Zeros({n * kBlock}, DType::kF32);
      LOCKSTEP_RETURN_IF_ERROR(AllToAll(ctx, input, blocks, output, blocks, even));
      const uint32_t want_steps = even ? 3 : 1;
      if (ctx.next_tag != want_steps) {
        return absl::InternalError(absl::StrCat(ctx.next_tag, " steps, expected ", want_steps));
      }
      return CheckValues(output, [&](int64_t i) { return ValueOf(static_cast<int>(i / kBlock), r, i % kBlock); });
    });
    for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << (even ? "even: " : "V: ") << s;
  }
}

}  // namespace
}  // namespace lockstep
