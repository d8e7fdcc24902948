// Rabenseifner's all-reduce over the fake transport at every world size
// from 1 to 17: exact sums, maxes and averages; the same bits on every rank
// for inputs whose sum depends on the order; the bytes each rank sends.
#include "collectives/algorithms/rabenseifner_all_reduce.h"

#include <cstring>
#include <mutex>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/algorithms/algorithm.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using namespace testing;  // The algorithm test helpers.

std::vector<AlgorithmRun> WorldsOneToSeventeen() {
  std::vector<AlgorithmRun> runs;
  for (int n = 1; n <= 17; ++n) {
    AlgorithmRun run;
    run.size = n;
    run.capacity_bytes = n % 3 == 0 ? 100 : 64 << 10;  // Some worlds block every transfer.
    runs.push_back(run);
  }
  return runs;
}

TEST(RabenseifnerAllReduceTest, SumsMaxesAndAveragesExactlyAtEveryWorldSize) {
  for (const AlgorithmRun& run : WorldsOneToSeventeen()) {
    const int n = run.size;
    // Fewer elements than ranks (empty chunks), uneven chunks, many.
    for (int64_t count : {int64_t{1}, int64_t{n}, int64_t{7} * n + 3, int64_t{4099}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
        auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
          Tensor t = RankInput(ctx.rank(), count);
          LOCKSTEP_RETURN_IF_ERROR(RabenseifnerAllReduce(ctx, t, op));
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

TEST(RabenseifnerAllReduceTest, EveryRankGetsTheSameBits) {
  // Random floats of mixed magnitude: their sum depends on the order, so
  // equal results show one reduction copied, not p computed.
  for (const AlgorithmRun& run : WorldsOneToSeventeen()) {
    const int n = run.size;
    constexpr int64_t kCount = 1031;
    std::vector<std::vector<uint32_t>> bits(n);
    std::mutex mu;
    auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
      std::mt19937 gen(1234 + ctx.rank());
      std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
      std::uniform_int_distribution<int> exponent(-20, 20);
      Tensor t = *Tensor::Empty({kCount}, DType::kF32);
      for (int64_t i = 0; i < kCount; ++i) t.data<float>()[i] = std::ldexp(mantissa(gen), exponent(gen));
      LOCKSTEP_RETURN_IF_ERROR(RabenseifnerAllReduce(ctx, t, ReduceOp::kSum));
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

TEST(RabenseifnerAllReduceTest, SendsTheRingsBytesInLogarithmicSteps) {
  // A power of two sends 2(p-1)/p of the buffer; 6 ranks fold 2 pairs
  // (the even rank of a pair sends all of it, the odd one gets and returns
  // it) around a 4-rank core.
  constexpr int64_t kCount = 4096;  // Divides by 4 and 8: chunks are equal.
  for (int n : {2, 4, 8, 6}) {
    AlgorithmRun run;
    run.size = n;
    std::vector<uint64_t> sent(n), messages(n);
    auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
      Tensor t = RankInput(ctx.rank(), kCount);
      LOCKSTEP_RETURN_IF_ERROR(RabenseifnerAllReduce(ctx, t, ReduceOp::kSum));
      const TrafficCounters traffic = ctx.transport.Traffic();
      for (uint64_t b : traffic.bytes_sent) sent[ctx.rank()] += b;
      return absl::OkStatus();
    });
    for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
    const uint64_t bytes = kCount * sizeof(float);
    const PowerOfTwoFold shape(n, 0);
    for (int r = 0; r < n; ++r) {
      const PowerOfTwoFold fold(n, r);
      const uint64_t core = 2 * bytes * (shape.p - 1) / shape.p;
      const uint64_t want = !fold.paired() ? core : fold.folded_away() ? bytes : core + bytes;
      EXPECT_EQ(sent[r], want) << n << " ranks, rank " << r;
    }
  }
}

}  // namespace
}  // namespace lockstep
