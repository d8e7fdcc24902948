// Writes a trained MLP's checkpoint for nn/testdata/check_checkpoint_in_torch.py,
// which loads it into PyTorch and compares logits:
//   bazel run //nn:write_example_checkpoint -- /tmp/ckpt
//   /usr/bin/python3 nn/testdata/check_checkpoint_in_torch.py /tmp/ckpt
// Files: checkpoint.safetensors (model + AdamW state + progress),
// model.safetensors (weights only), probe.safetensors (an input batch "x"
// and lockstep's logits for it, "logits").
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/mt19937.h"
#include "core/status.h"
#include "nn/adam.h"
#include "nn/checkpoint/checkpoint.h"
#include "nn/checkpoint/safetensors.h"
#include "nn/cross_entropy.h"
#include "nn/mlp.h"

namespace lockstep {
namespace {

absl::StatusOr<Tensor> RandomImages(Mt19937& gen, int64_t batch) {
  std::vector<float> x(batch * 784);
  for (float& v : x) v = static_cast<float>(gen.Next32() % 2001) / 1000.0f - 1.0f;
  return Tensor::FromVector<float>(x, {batch, 1, 28, 28});
}

absl::Status Run(const std::string& dir) {
  Mt19937 gen(0);
  MlpOptions options;
  options.sizes = {784, 512, 256, 10};
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> model, MakeMlp(options, gen));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Adam> adamw, Adam::Create(model->NamedParameters(), AdamWOptions()));
  Mt19937 data(7);
  for (int step = 0; step < 3; ++step) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor x, RandomImages(data, 64));
    std::vector<int64_t> labels(64);
    for (int64_t& y : labels) y = data.Next32() % 10;
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor y, Tensor::FromVector<int64_t>(labels));
    LOCKSTEP_RETURN_IF_ERROR(adamw->ZeroGrad());
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, model->Forward(x));
    LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, y));
    LOCKSTEP_RETURN_IF_ERROR(model->Backward(ce.grad_logits, false).status());
    LOCKSTEP_RETURN_IF_ERROR(adamw->Step());
  }
  TrainingProgress progress;
  progress.epoch = 1;
  progress.step = 3;
  LOCKSTEP_RETURN_IF_ERROR(SaveCheckpoint(dir + "/checkpoint.safetensors", *model, adamw.get(), progress));
  LOCKSTEP_RETURN_IF_ERROR(SaveModel(dir + "/model.safetensors", *model));
  model->Eval();
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor probe, RandomImages(data, 16));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, model->Forward(probe));
  return WriteSafetensorsFile(dir + "/probe.safetensors", {{"x", probe}, {"logits", logits}});
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_example_checkpoint <existing output directory>\n");
    return 2;
  }
  absl::Status s = lockstep::Run(argv[1]);
  if (!s.ok()) {
    std::fprintf(stderr, "write_example_checkpoint: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("wrote checkpoint.safetensors, model.safetensors, probe.safetensors to %s\n", argv[1]);
  return 0;
}
