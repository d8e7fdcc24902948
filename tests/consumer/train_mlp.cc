// Trains a small MLP with lockstep's nn and amp targets from an external
// workspace: 30 SGD steps on a fixed, separable batch; prints whether the
// loss fell and whether a checkpoint round-trips.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "core/mt19937.h"
#include "nn/checkpoint.h"
#include "nn/cross_entropy.h"
#include "nn/mlp.h"
#include "nn/sgd.h"

int main() {
  using namespace lockstep;
  Mt19937 gen(0);
  MlpOptions options;
  options.sizes = {4, 16, 2};
  options.flatten = false;
  std::unique_ptr<Sequential> model = *MakeMlp(options, gen);
  SgdOptions sgd;
  sgd.lr = 0.5;
  std::unique_ptr<Sgd> optimizer = *Sgd::Create(model->NamedParameters(), sgd);
  GradScalerOptions scaler_options;
  scaler_options.enabled = false;  // f32: no loss scaling needed
  GradScaler scaler = *GradScaler::Create(scaler_options);
  // Class = whether the first feature is positive.
  std::vector<float> x = {1, 0, 0, 1, -1, 0, 1, 0, 2, 1, 0, 0, -2, 0, 0, 1};
  Tensor batch = *Tensor::FromVector<float>(x, {4, 4});
  Tensor labels = *Tensor::FromVector<int64_t>({1, 0, 1, 0});
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    if (!optimizer->ZeroGrad().ok()) return 1;
    absl::StatusOr<CrossEntropyResult> ce = CrossEntropy(*model->Forward(batch), labels);
    if (!ce.ok() || !model->Backward(ce->grad_logits, false).ok()) return 1;
    std::vector<Tensor> grads;
    for (Parameter* p : model->Parameters()) grads.push_back(p->grad);
    if (!scaler.Step(grads, [&] { return optimizer->Step(); }).ok()) return 1;
    (step == 0 ? first : last) = ce->loss;
  }
  std::printf("loss fell: %s\n", last < 0.5 * first ? "yes" : "no");
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir ? dir : "/tmp") + "/consumer.safetensors";
  TrainingProgress progress;
  progress.step = 30;
  absl::Status saved = SaveCheckpoint(path, *model, optimizer.get(), progress);
  absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(path, *model, optimizer.get());
  std::printf("checkpoint: %s\n", saved.ok() && loaded.ok() && loaded->progress.step == 30 ? "ok" : "failed");
  return 0;
}
