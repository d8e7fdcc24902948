// resnet18_trainer: ResNet-18 (interop/torch/models/resnet18.h, 1-channel
// stem, 10 classes) on Fashion-MNIST, a libtorch model under lockstep's DDP
// and training loop.
//
//   bazel run --config=opt //interop/torch/trainers:resnet18_trainer -- --nproc=2
//
// Flags: interop/torch/trainers/torch_trainer.h's, --dataset (auto,
// fashion-mnist, synthetic or a directory of IDX files, as ddp_trainer) and
// --width (layer1's channels, 64). Defaults: 1 epoch, batch 64 per rank,
// SGD with lr 0.1 and momentum 0.9.
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "data/example_dataset.h"
#include "interop/torch/bridge/torch_module.h"
#include "interop/torch/models/resnet18.h"
#include "interop/torch/trainers/torch_trainer.h"
#include "trainers/trainer_setup.h"

#include <torch/utils.h>

ABSL_FLAG(int64_t, width, 64, "channels of layer1 (layer k has width * 2^(k-1))");

namespace lockstep {
namespace interop {
namespace {

absl::StatusOr<TorchTrainerSpec> MakeSpec(const TrainerConfig& config) {
  const int64_t width = absl::GetFlag(FLAGS_width);
  if (width < 1 || width > 4096) return absl::InvalidArgumentError("--width must be in [1, 4096]");
  LOCKSTEP_ASSIGN_OR_RETURN(TrainerDatasets data, LoadTrainerDatasets(config));
  TorchTrainerSpec spec;
  spec.train = AsExamples(data.train);
  spec.test = AsExamples(data.test);
  spec.data_description = data.description;
  spec.model_description = absl::StrCat("ResNet-18 (width ", width, ")");
  spec.checkpoint_metadata["model.resnet18"] =
      absl::StrCat("{\"in_channels\":1,\"num_classes\":10,\"width\":", width, "}");
  spec.make_model = [width](uint64_t seed, bool sharded) -> absl::StatusOr<std::unique_ptr<TorchModule>> {
    torch::manual_seed(seed);
    ResNet18Options options;
    options.width = width;
    options.shard_blocks = sharded;
    return TorchModule::Create(ResNet18(options));
  };
  return spec;
}

}  // namespace
}  // namespace interop
}  // namespace lockstep

int main(int argc, char** argv) {
  using namespace lockstep::interop;
  TorchTrainerInfo info;
  info.program = "resnet18_trainer";
  info.extra_usage = "  --width=64  (--dataset as above; defaults here: --epochs=1)\n";
  info.defaults = {{"epochs", "1"}};
  info.unused_flags = {"model", "amp", "device", "freeze"};
  return TorchTrainerMain(argc, argv, info, MakeSpec);
}
