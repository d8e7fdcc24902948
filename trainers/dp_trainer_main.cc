// dp_trainer: the reference DataParallel trainer. One process drives every
// device in --devices: each step scatters the batch (--batch_size is the
// GLOBAL batch, as with torch.nn.DataParallel), runs a replica per device
// on its worker thread and sums the gradients into the model on the first
// device (dp/data_parallel.h).
//
//   bazel run --config=opt //trainers:dp_trainer -- --devices=cpu:0,cpu:1 --epochs=3
//
// --devices defaults to every CUDA device, else cpu:0,cpu:1 (CPU devices
// are first class: one worker thread and one replica each). The other flags,
// the metrics, checkpoints (plain module names), progress and the trace are
// the shared loop's; the trace also gets DP's phases ("dp scatter", "dp
// replicate", "dp apply", "dp gather" inside forward; "dp scatter grad",
// "dp apply backward", "dp reduce" inside backward).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/cuda/cuda_runtime.h"
#include "core/status.h"
#include "dp/data_parallel.h"
#include "nn/blas_kernels.h"
#include "trainers/train_loop.h"
#include "trainers/trainer_setup.h"

ABSL_FLAG(std::string, devices, "",
          "comma-separated devices (cpu:0,cpu:1 or cuda:0,cuda:1); default every CUDA device, else "
          "cpu:0,cpu:1");

namespace lockstep {
namespace {

constexpr char kProgram[] = "dp_trainer";
constexpr char kDpUsage[] = "  --devices=cpu:0,cpu:1  (default: every CUDA device, else cpu:0,cpu:1)\n";

// The loop's ModelStepper over DataParallel; DP's phases go to the trace.
class DpStepper : public ModelStepper {
 public:
  explicit DpStepper(std::unique_ptr<DataParallel> dp) : dp_(std::move(dp)) {}
  Module& module() override { return dp_->module(); }
  absl::StatusOr<Tensor> Forward(const Tensor& input) override { return dp_->Forward(input); }
  absl::Status Backward(const Tensor& grad_output) override {
    return dp_->Backward(grad_output, /*input_grad=*/false).status();
  }
  void AttachTrace(TraceRecorder* trace) override {
    if (trace == nullptr) {
      dp_->SetPhaseObserver(nullptr);
      return;
    }
    dp_->SetPhaseObserver([trace](const DpPhaseTiming& t) {
      std::string name = absl::StrCat("dp ", t.phase);
      if (t.backward) name += std::string(t.phase) == "apply" ? " backward" : " grad";
      if (t.backward && std::string(t.phase) == "reduce") name = "dp reduce";
      trace->Complete(std::move(name), "dp", t.start, t.end, TraceRecorder::kTrainThread, {{"replicas", t.replicas}});
    });
  }

 private:
  std::unique_ptr<DataParallel> dp_;
};

absl::StatusOr<std::vector<Device>> ParseDevices(const std::string& text) {
  std::vector<Device> devices;
  if (text.empty()) {
    for (int i = 0; i < cuda::DeviceCount(); ++i) devices.push_back(Device::Cuda(i));
    if (devices.empty()) devices = {Device::Cpu(0), Device::Cpu(1)};
    return devices;
  }
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    absl::StatusOr<Device> d = Device::Parse(part);
    if (!d.ok()) return absl::InvalidArgumentError(absl::StrCat("--devices=", text, ": ", d.status().message()));
    devices.push_back(*d);
  }
  return devices;
}

absl::Status Run(const TrainerConfig& config, const TrainerDatasets& data, const std::vector<Device>& devices) {
  const Device master = devices[0];
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Module> model,
                            MakeModel(config.model, config.seed, config.precision.compute_dtype, master));
  LOCKSTEP_RETURN_IF_ERROR(FreezeParameters(config, *model));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, MakeOptimizer(config, *model));
  LOCKSTEP_ASSIGN_OR_RETURN(GradScaler scaler, MakeGradScaler(config));
  DataParallelOptions options;
  options.device_ids = devices;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<DataParallel> dp, DataParallel::Create(*model, options));
  std::vector<std::string> names;
  for (Device d : devices) names.push_back(d.ToString());
  std::printf(
      "%s: devices %s, model %s (%lld parameters), %s, optimizer %s, precision %s, "
      "global batch %lld, BLAS kernels %s%s\n",
      kProgram, absl::StrJoin(names, ",").c_str(), config.model.c_str(),
      static_cast<long long>(model->NumParameterElements()), data.description.c_str(), config.optimizer.c_str(),
      PrecisionName(config.precision).c_str(), static_cast<long long>(config.batch_size), BlasCoreName().c_str(),
      ConvolutionKernelsNote(config).c_str());
  std::fflush(stdout);
  DpStepper stepper(std::move(dp));
  TrainParts parts;
  parts.stepper = &stepper;
  parts.optimizer = optimizer.get();
  parts.scaler = &scaler;
  parts.train = data.train;
  parts.test = data.test;
  TrainLoopOptions loop = MakeLoopOptions(config, /*rank=*/0, /*world_size=*/1);
  loop.device = master;  // batches and evaluation on device_ids[0]
  LOCKSTEP_ASSIGN_OR_RETURN(TrainResult result, RunTraining(loop, parts));
  PrintFinalResult(kProgram, result, absl::StrCat("on ", devices.size(), " devices"));
  PrintStepBreakdown(kProgram, result);
  return absl::OkStatus();
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  using namespace lockstep;
  absl::StatusOr<TrainerConfig> config = StartTrainerOrExit(argc, argv, kProgram, kDpUsage);
  absl::StatusOr<std::vector<Device>> devices = ParseDevices(absl::GetFlag(FLAGS_devices));
  if (!devices.ok()) return UsageError(kProgram, devices.status());
  // DataParallel's own checks (empty list, duplicates, mixed types) as usage errors.
  for (size_t i = 0; i < devices->size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if ((*devices)[i] == (*devices)[j]) {
        return UsageError(kProgram, absl::InvalidArgumentError(
                                        absl::StrCat("--devices: ", (*devices)[i].ToString(), " is listed twice")));
      }
    }
  }
  absl::StatusOr<TrainerDatasets> data = LoadTrainerDatasets(*config);
  if (absl::IsNotFound(data.status())) return UsageError(kProgram, data.status());  // --dataset
  absl::Status s = data.status();
  if (s.ok()) s = Run(*config, *data, *devices);
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, s.ToString().c_str());
    return 1;
  }
  return 0;
}
