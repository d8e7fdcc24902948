// Runs a collective algorithm on n threads over an in-memory FakeNetwork,
// each with its own AlgorithmContext: the algorithms' unit tests, with the
// network capacity and pipelining sizes under the test's control.
#ifndef LOCKSTEP_COLLECTIVES_TESTING_ALGORITHM_TEST_UTIL_H_
#define LOCKSTEP_COLLECTIVES_TESTING_ALGORITHM_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collectives/algorithms/algorithm.h"
#include "core/tensor.h"

namespace lockstep {
namespace testing {

struct AlgorithmRun {
  int size = 2;
  size_t capacity_bytes = 64 << 10;  // Of each fake connection.
  AlgorithmOptions algorithms;
};

// One status per rank; the ranks' contexts have seq 1 and a 30 s deadline.
std::vector<absl::Status> RunAlgorithm(const AlgorithmRun& run,
                                       const std::function<absl::Status(AlgorithmContext& ctx)>& body);

// Rank r's element i: a small integer, so f32 sums of a few ranks are exact.
float InputValue(int rank, int64_t i);

// A 1-D f32 tensor with InputValue(rank, offset + i).
Tensor RankInput(int rank, int64_t count, int64_t offset = 0);

// OK, or an error naming the first element of `t` that differs from `want(i)`.
absl::Status CheckValues(const Tensor& t, const std::function<float(int64_t i)>& want);

// Sum over ranks 0..n-1 of InputValue(r, i).
float SumOver(int n, int64_t i);

// Element i of an all-reduce (or a reduce's root) of RankInput over ranks
// 0..n-1: SumOver for kSum, its exact quotient by n for kAvg, rank n-1's
// InputValue for kMax.
float ReducedValue(ReduceOp op, int n, int64_t i);

// Runs `all_reduce` on every rank of `run` over `count` random floats of
// mixed magnitude (their sum depends on the order of additions); OK when
// every rank ends with the same bits as rank 0, else an error naming the
// first rank that differs.
absl::Status SameBitsOnEveryRank(const AlgorithmRun& run, int64_t count,
                                 const std::function<absl::Status(AlgorithmContext& ctx, const Tensor& t)>& all_reduce);

// "3 ranks, 1000 elements, capacity 700, segment 68", for failure messages.
std::string Describe(const AlgorithmRun& run, int64_t count);

// Per-rank counts for the uneven (V) collectives: n counts, some of them 0
// (rank 1's, when n > 1), the others different multiples of `scale`.
std::vector<int64_t> UnevenCounts(int n, int64_t scale);

// The index of the block of `blocks` that holds element i (blocks tile a
// buffer in order).
int BlockOwning(absl::Span<const Chunk> blocks, int64_t i);

// The runs most algorithm tests sweep: every world size 1-17 (powers of two
// and not) with generous connections and default segments, and at 1-5, 8
// and 17 also tiny connection capacities and small segments.
std::vector<AlgorithmRun> StandardRuns();

}  // namespace testing
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_TESTING_ALGORITHM_TEST_UTIL_H_
