// single_trainer: the one-process baseline of the reference trainers; the
// same loop, flags and outputs as ddp_trainer without the communication.
//
//   bazel run --config=opt //trainers:single_trainer -- --epochs=3 --metrics=/tmp/m.jsonl
#include <cstdio>

#include "core/status.h"
#include "nn/blas_kernels.h"
#include "trainers/train_loop.h"
#include "trainers/trainer_setup.h"

namespace lockstep {
namespace {

constexpr char kProgram[] = "single_trainer";

absl::Status Run(const TrainerConfig& config, const TrainerDatasets& data) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Module> model,
                            MakeModel(config.model, config.seed, config.precision.compute_dtype, config.device));
  LOCKSTEP_RETURN_IF_ERROR(FreezeParameters(config, *model));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, MakeOptimizer(config, *model));
  LOCKSTEP_ASSIGN_OR_RETURN(GradScaler scaler, MakeGradScaler(config));
  std::printf("%s: model %s (%lld parameters), %s, optimizer %s, precision %s, device %s, BLAS kernels %s%s\n",
              kProgram, config.model.c_str(), static_cast<long long>(model->NumParameterElements()),
              data.description.c_str(), config.optimizer.c_str(), PrecisionName(config.precision).c_str(),
              config.device.ToString().c_str(), BlasCoreName().c_str(), ConvolutionKernelsNote(config).c_str());
  LocalStepper stepper(*model);
  TrainParts parts;
  parts.stepper = &stepper;
  parts.optimizer = optimizer.get();
  parts.scaler = &scaler;
  parts.train = data.train;
  parts.test = data.test;
  LOCKSTEP_ASSIGN_OR_RETURN(TrainResult result,
                            RunTraining(MakeLoopOptions(config, /*rank=*/0, /*world_size=*/1), parts));
  PrintFinalResult(kProgram, result, "");
  PrintStepBreakdown(kProgram, result);
  return absl::OkStatus();
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  using namespace lockstep;
  absl::StatusOr<TrainerConfig> config = StartTrainerOrExit(argc, argv, kProgram, "");
  absl::StatusOr<TrainerDatasets> data = LoadTrainerDatasets(*config);
  if (absl::IsNotFound(data.status())) return UsageError(kProgram, data.status());  // --dataset
  absl::Status s = data.status();
  if (s.ok()) s = Run(*config, *data);
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, s.ToString().c_str());
    return 1;
  }
  return 0;
}
