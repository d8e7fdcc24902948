// Bruck's all-to-all over the fake transport at every world size from 1 to
// 17: every block arrives in place; ceil(log2 p) steps and the bytes each
// rank sends; a bad shape is named.
#include "collectives/algorithms/bruck_all_to_all.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/algorithms/algorithm.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using namespace testing;  // The algorithm test helpers.

// Element k of the block rank `from` sends rank `to`: exact in f32.
float ValueOf(int from, int to, int64_t k) { return static_cast<float>(from * 10000 + to * 100 + k % 97); }

Tensor InputOf(int r, int n, int64_t block) {
  Tensor t = *Tensor::Empty({n * block}, DType::kF32);
  for (int j = 0; j < n; ++j) {
    for (int64_t k = 0; k < block; ++k) t.data<float>()[j * block + k] = ValueOf(r, j, k);
  }
  return t;
}

TEST(BruckAllToAllTest, EveryRankGetsItsBlockFromEveryRankAtEveryWorldSize) {
  for (int n = 1; n <= 17; ++n) {
    AlgorithmRun run;
    run.size = n;
    run.capacity_bytes = n % 3 == 0 ? 100 : 64 << 10;  // Some worlds block every transfer.
    for (int64_t block : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{257}}) {
      auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
        const int r = ctx.rank();
        Tensor input = InputOf(r, n, block);
        Tensor output = *Tensor::Zeros({n * block}, DType::kF32);
        LOCKSTEP_RETURN_IF_ERROR(BruckAllToAll(ctx, input, output, block));
        LOCKSTEP_RETURN_IF_ERROR(CheckValues(input, [&](int64_t i) { return ValueOf(r, i / block, i % block); }));
        return CheckValues(output, [&](int64_t i) { return ValueOf(i / block, r, i % block); });
      });
      for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << Describe(run, block) << " per block: " << s;
    }
  }
}

TEST(BruckAllToAllTest, LogarithmicStepsAndTheirBytes) {
  constexpr int64_t kBlock = 10;
  for (int n : {2, 5, 8, 13}) {
    AlgorithmRun run;
    run.size = n;
    std::vector<uint64_t> sent(n);
    std::vector<uint32_t> steps(n);
    auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
      Tensor output = *Tensor::Zeros({n * kBlock}, DType::kF32);
      LOCKSTEP_RETURN_IF_ERROR(BruckAllToAll(ctx, InputOf(ctx.rank(), n, kBlock), output, kBlock));
      for (uint64_t b : ctx.transport.Traffic().bytes_sent) sent[ctx.rank()] += b;
      steps[ctx.rank()] = ctx.next_tag;
      return absl::OkStatus();
    });
    for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << n << " ranks: " << s;
    // Step k sends the slots 1..n-1 whose index has bit k set.
    uint64_t want = 0;
    uint32_t want_steps = 0;
    for (int step = 1; step < n; step <<= 1, ++want_steps) {
      for (int i = 1; i < n; ++i) want += (i & step) != 0 ? kBlock * sizeof(float) : 0;
    }
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(sent[r], want) << n << " ranks, rank " << r;
      EXPECT_EQ(steps[r], want_steps) << n << " ranks, rank " << r;
    }
  }
}

TEST(BruckAllToAllTest, ABadShapeIsNamed) {
  AlgorithmRun run;
  run.size = 2;
  auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
    return BruckAllToAll(ctx, *Tensor::Zeros({5}, DType::kF32), *Tensor::Zeros({4}, DType::kF32), 2);
  });
  for (const absl::Status& s : results) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("need 2 blocks of 2 elements; they have 5 and 4"), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace lockstep
