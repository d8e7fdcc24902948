// Ring all-gather over the fake transport: chunks land in place on every rank.
#include "collectives/all_gather.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "collectives/algorithm.h"
#include "collectives/testing/algorithm_test_util.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using testing::AlgorithmRun;
using testing::CheckValues;
using testing::InputValue;
using testing::RankInput;
using testing::RunAlgorithm;
using testing::StandardRuns;

[[maybe_unused]] std::string Describe(const AlgorithmRun& run, int64_t count) {
  return absl::StrCat(run.size, " ranks, ", count, " elements, capacity ", run.capacity_bytes, ", segment ",
                      run.algorithms.segment_bytes);
}

// Sum over ranks of InputValue(r, i).
[[maybe_unused]] float SumOver(int n, int64_t i) {
  float s = 0;
  for (int r = 0; r < n; ++r) s += InputValue(r, i);
  return s;
}

TEST(AllGatherTest, EveryRankGetsEveryChunk) {
  for (const AlgorithmRun& run : StandardRuns()) {
    for (int64_t count : {int64_t{run.size}, int64_t{7} * run.size + 3, int64_t{10007}}) {
      auto owner = [&](int64_t i) {
        for (int r = 0; r < run.size; ++r) {
          const Chunk c = ChunkOf(count, run.size, r);
          if (i >= c.offset && i < c.offset + c.count) return r;
        }
        return -1;
      };
      auto results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
        Tensor t = *Tensor::Zeros({count}, DType::kF32);
        const Chunk mine = ChunkOf(count, ctx.size(), ctx.rank());
        for (int64_t i = 0; i < mine.count; ++i) t.data<float>()[mine.offset + i] = InputValue(ctx.rank(), mine.offset + i);
        LOCKSTEP_RETURN_IF_ERROR(RingAllGather(ctx, t));
        return CheckValues(t, [&](int64_t i) { return InputValue(owner(i), i); });
      });
      for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << Describe(run, count) << ": " << s;
    }
  }
}

}  // namespace
}  // namespace lockstep
