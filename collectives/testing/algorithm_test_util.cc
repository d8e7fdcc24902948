#include "collectives/testing/algorithm_test_util.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "collectives/testing/fake_transport.h"

namespace lockstep {
namespace testing {

std::vector<absl::Status> RunAlgorithm(const AlgorithmRun& run,
                                       const std::function<absl::Status(AlgorithmContext& ctx)>& body) {
  std::vector<std::unique_ptr<Transport>> transports = FakeNetwork::Create(run.size, {run.capacity_bytes});
  std::vector<absl::Status> results(run.size);
  std::vector<std::thread> threads;
  for (int r = 0; r < run.size; ++r) {
    threads.emplace_back([&, r] {
      Scratch scratch;
      AlgorithmContext ctx{
          *transports[r], /*seq=*/1, 0, DeadlineIn(std::chrono::milliseconds(30000)), run.algorithms.segment_bytes,
          &scratch};
      ctx.small_message_bytes = run.algorithms.small_message_bytes;
      ctx.all_reduce = run.algorithms.all_reduce;
      ctx.link = run.algorithms.link.value_or(LinkConstants());
      ctx.ranks_per_host = run.algorithms.ranks_per_host;
      ctx.ranks_per_core = run.algorithms.ranks_per_core;
      results[r] = body(ctx);
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

float InputValue(int rank, int64_t i) { return static_cast<float>((rank + 1) * 100 + i % 61); }

Tensor RankInput(int rank, int64_t count, int64_t offset) {
  Tensor t = *Tensor::Empty({count}, DType::kF32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < count; ++i) p[i] = InputValue(rank, offset + i);
  return t;
}

absl::Status CheckValues(const Tensor& t, const std::function<float(int64_t i)>& want) {
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (p[i] != want(i)) {
      return absl::InternalError(absl::StrCat("element ", i, " is ", p[i], ", expected ", want(i)));
    }
  }
  return absl::OkStatus();
}

float SumOver(int n, int64_t i) {
  float s = 0;
  for (int r = 0; r < n; ++r) s += InputValue(r, i);
  return s;
}

float ReducedValue(ReduceOp op, int n, int64_t i) {
  if (op == ReduceOp::kMax) return InputValue(n - 1, i);
  const float sum = SumOver(n, i);
  return op == ReduceOp::kAvg ? sum / static_cast<float>(n) : sum;
}

absl::Status SameBitsOnEveryRank(
    const AlgorithmRun& run, int64_t count,
    const std::function<absl::Status(AlgorithmContext& ctx, const Tensor& t)>& all_reduce) {
  std::vector<std::vector<uint32_t>> bits(run.size);
  std::mutex mu;
  const std::vector<absl::Status> results = RunAlgorithm(run, [&](AlgorithmContext& ctx) -> absl::Status {
    std::mt19937 gen(1234 + ctx.rank());
    std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-20, 20);
    absl::StatusOr<Tensor> t = Tensor::Empty({count}, DType::kF32);
    if (!t.ok()) return t.status();
    for (int64_t i = 0; i < count; ++i) t->data<float>()[i] = std::ldexp(mantissa(gen), exponent(gen));
    if (absl::Status s = all_reduce(ctx, *t); !s.ok()) return s;
    std::vector<uint32_t> mine(static_cast<size_t>(count));
    std::memcpy(mine.data(), t->raw_data(), static_cast<size_t>(count) * sizeof(float));
    std::lock_guard<std::mutex> lock(mu);
    bits[ctx.rank()] = std::move(mine);
    return absl::OkStatus();
  });
  for (int r = 0; r < run.size; ++r) {
    if (!results[r].ok()) return results[r];
  }
  for (int r = 1; r < run.size; ++r) {
    if (bits[r] != bits[0]) {
      return absl::InternalError(absl::StrCat(run.size, " ranks: rank ", r, "'s result differs from rank 0's"));
    }
  }
  return absl::OkStatus();
}

std::vector<int64_t> UnevenCounts(int n, int64_t scale) {
  std::vector<int64_t> counts;
  for (int r = 0; r < n; ++r) counts.push_back(r == 1 ? 0 : ((r * 5 + 3) % 7 + 1) * scale);
  return counts;
}

int BlockOwning(absl::Span<const Chunk> blocks, int64_t i) {
  for (size_t b = 0; b < blocks.size(); ++b) {
    if (i >= blocks[b].offset && i < blocks[b].offset + blocks[b].count) return static_cast<int>(b);
  }
  return -1;
}

std::string Describe(const AlgorithmRun& run, int64_t count) {
  return absl::StrCat(run.size, " ranks, ", count, " elements, capacity ", run.capacity_bytes, ", segment ",
                      run.algorithms.segment_bytes);
}

std::vector<AlgorithmRun> StandardRuns() {
  std::vector<AlgorithmRun> runs;
  for (int n = 1; n <= 17; ++n) {
    AlgorithmRun roomy;
    roomy.size = n;
    runs.push_back(roomy);
    // Above 5 ranks, a tight run at a few sizes only (the thread count
    // makes every run slower): a power of two, a power of two plus one.
    if (n > 5 && n != 8 && n != 17) continue;
    AlgorithmRun tight;  // Every transfer blocks on the receiver; odd segments.
    tight.size = n;
    tight.capacity_bytes = 700;
    tight.algorithms.segment_bytes = 68;
    runs.push_back(tight);
  }
  return runs;
}

}  // namespace testing
}  // namespace lockstep
