// Training-step time of the MLP 784-512-256-10 at batch 128 on one core:
// forward, cross-entropy, backward (input gradient skipped, as PyTorch skips
// it for an input without requires_grad), optimizer step, zero_grad.
// Peer: tools/bench/peers/torch_mlp_step.py; both together:
//   bash tools/bench/compare_mlp_step.sh [runs]
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/mt19937.h"
#include "nn/adam.h"
#include "nn/cross_entropy.h"
#include "nn/math.h"
#include "nn/mlp.h"
#include "nn/sgd.h"

namespace lockstep {
namespace {

constexpr int kBatch = 128;

struct Setup {
  std::unique_ptr<Sequential> model;
  std::unique_ptr<Optimizer> optimizer;
  Tensor images, labels;
};

Setup Make(bool adamw) {
  if (!SetCpuMathThreads(1).ok()) std::abort();
  Mt19937 gen(0);
  MlpOptions options;
  options.sizes = {784, 512, 256, 10};
  Setup s;
  s.model = *MakeMlp(options, gen);
  if (adamw) {
    s.optimizer = *Adam::Create(s.model->NamedParameters(), AdamWOptions());
  } else {
    SgdOptions sgd;
    sgd.lr = 0.01;
    sgd.momentum = 0.9;
    s.optimizer = *Sgd::Create(s.model->NamedParameters(), sgd);
  }
  std::vector<float> x(kBatch * 784);
  Mt19937 data(1);
  for (float& v : x) v = static_cast<float>(data.Next32() % 1000) / 500.0f - 1.0f;
  s.images = *Tensor::FromVector<float>(x, {kBatch, 1, 28, 28});
  std::vector<int64_t> y(kBatch);
  for (int64_t& v : y) v = data.Next32() % 10;
  s.labels = *Tensor::FromVector<int64_t>(y);
  return s;
}

void TrainStep(benchmark::State& state, bool adamw) {
  Setup s = Make(adamw);
  for (auto _ : state) {
    absl::StatusOr<Tensor> logits = s.model->Forward(s.images);
    absl::StatusOr<CrossEntropyResult> ce = CrossEntropy(*logits, s.labels);
    if (!ce.ok() || !s.model->Backward(ce->grad_logits, /*input_grad=*/false).ok() || !s.optimizer->Step().ok() ||
        !s.optimizer->ZeroGrad().ok()) {
      state.SkipWithError("training step failed");
      return;
    }
    benchmark::DoNotOptimize(ce->loss);
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}

void BM_MlpTrainStepSgd(benchmark::State& state) { TrainStep(state, false); }
void BM_MlpTrainStepAdamW(benchmark::State& state) { TrainStep(state, true); }

void BM_MlpForward(benchmark::State& state) {
  Setup s = Make(false);
  s.model->Eval();
  for (auto _ : state) benchmark::DoNotOptimize(s.model->Forward(s.images)->raw_data());
  state.SetItemsProcessed(state.iterations() * kBatch);
}

BENCHMARK(BM_MlpTrainStepSgd)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MlpTrainStepAdamW)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MlpForward)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace lockstep
