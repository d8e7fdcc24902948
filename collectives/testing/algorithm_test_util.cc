#include "collectives/testing/algorithm_test_util.h"

#include <memory>
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
  for (int n = 1; n <= 5; ++n) {
    AlgorithmRun roomy;
    roomy.size = n;
    runs.push_back(roomy);
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
