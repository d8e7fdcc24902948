// The tree all-reduce over the fake transport at every world size from 1
// to 17: exact sums, maxes and averages; the same bits on every rank for
// inputs whose sum depends on the order.
#include "collectives/algorithms/tree_all_reduce.h"

#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <vector>

#include "collectives/algorithms/algorithm.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using namespace testing;  // The algorithm test helpers.

TEST(TreeAllReduceTest, SumsMaxesAndAveragesExactlyAtEveryWorldSize) {
  for (int n = 1; n <= 17; ++n) {
    AlgorithmRun run;
    run.size = n;
    run.capacity_bytes = n % 3 == 0 ? 100 : 64 << 10;
    // A link that makes the chunk count more than one at these sizes.
    run.algorithms.link = LinkConstants{1, 1.0 / 1250, 0};
    for (int64_t count : {int64_t{1}, int64_t{7} * n + 3, int64_t{40000}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
        auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
          Tensor t = RankInput(ctx.rank(), count);
          LOCKSTEP_RETURN_IF_ERROR(TreeAllReduce(ctx, t, op));
          return CheckValues(t, [&](int64_t i) {
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

TEST(TreeAllReduceTest, EveryRankGetsTheSameBits) {
  for (int n = 1; n <= 17; ++n) {
    AlgorithmRun run;
    run.size = n;
    constexpr int64_t kCount = 1031;
    std::vector<std::vector<uint32_t>> bits(n);
    std::mutex mu;
    auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
      std::mt19937 gen(1234 + ctx.rank());
      std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
      std::uniform_int_distribution<int> exponent(-20, 20);
      Tensor t = *Tensor::Empty({kCount}, DType::kF32);
      for (int64_t i = 0; i < kCount; ++i) t.data<float>()[i] = std::ldexp(mantissa(gen), exponent(gen));
      LOCKSTEP_RETURN_IF_ERROR(TreeAllReduce(ctx, t, ReduceOp::kSum));
      std::vector<uint32_t> mine(kCount);
      std::memcpy(mine.data(), t.raw_data(), kCount * sizeof(float));
      std::lock_guard<std::mutex> lock(mu);
      bits[ctx.rank()] = std::move(mine);
      return absl::OkStatus();
    });
    for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << n << " ranks: " << s;
    for (int r = 1; r < n; ++r) EXPECT_EQ(bits[r], bits[0]) << n << " ranks: rank " << r << " differs from rank 0";
  }
}

}  // namespace
}  // namespace lockstep
