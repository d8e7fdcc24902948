#include "trainers/trainer_models.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/mt19937.h"
#include "core/status.h"
#include "nn/adam.h"
#include "nn/batch_norm.h"
#include "nn/conv2d.h"
#include "nn/flatten.h"
#include "nn/linear.h"
#include "nn/max_pool2d.h"
#include "nn/mlp.h"
#include "nn/relu.h"
#include "nn/sequential.h"
#include "nn/sgd.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<Module>> MakeModel(const std::string& name, uint64_t seed, DType compute_dtype,
                                                  Device device) {
  Mt19937 gen(seed);  // torch.manual_seed(seed), then the constructors draw in order.
  if (name == "mlp" || absl::StartsWith(name, "mlp:")) {
    MlpOptions options;
    options.sizes = {784, 512, 256, 10};
    if (name != "mlp") {
      LOCKSTEP_ASSIGN_OR_RETURN(options.sizes, MlpSizes(name));
    }
    options.compute_dtype = compute_dtype;
    options.device = device;
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> mlp, MakeMlp(options, gen));
    return std::unique_ptr<Module>(std::move(mlp));
  }
  if (name != "cnn") {
    return absl::InvalidArgumentError(absl::StrCat("model '", name, "': expected mlp or cnn"));
  }
  auto model = std::make_unique<Sequential>();
  int64_t in_channels = 1;
  for (int64_t out_channels : {32, 64}) {
    Conv2dOptions conv;
    conv.in_channels = in_channels;
    conv.out_channels = out_channels;
    conv.kernel_h = conv.kernel_w = 3;
    conv.pad_h = conv.pad_w = 1;
    conv.compute_dtype = compute_dtype;
    conv.device = device;
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Conv2d> c, Conv2d::Create(conv, gen));
    model->Add(std::move(c));
    BatchNormOptions bn;
    bn.num_features = out_channels;
    bn.device = device;
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<BatchNorm2d> b, BatchNorm2d::Create(bn));
    model->Add(std::move(b));
    model->Add(std::make_unique<ReLU>());
    model->Add(std::make_unique<MaxPool2d>(2));
    in_channels = out_channels;
  }
  model->Add(std::make_unique<Flatten>());
  for (auto [in, out] : {std::pair<int64_t, int64_t>{64 * 7 * 7, 128}, {128, 10}}) {
    LinearOptions linear;
    linear.in_features = in;
    linear.out_features = out;
    linear.compute_dtype = compute_dtype;
    linear.device = device;
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Linear> fc, Linear::Create(linear, gen));
    model->Add(std::move(fc));
    if (out == 128) model->Add(std::make_unique<ReLU>());
  }
  return std::unique_ptr<Module>(std::move(model));
}

absl::Status FreezeParameters(const TrainerConfig& c, Module& model) {
  for (const std::string& name : c.freeze) {
    absl::StatusOr<int64_t> n = model.SetRequiresGrad(name, false);
    if (!n.ok()) return absl::InvalidArgumentError(absl::StrCat("--freeze=", name, ": ", n.status().message()));
  }
  if (!c.freeze.empty()) {
    bool any = false;
    for (Parameter* p : model.Parameters()) any = any || p->requires_grad;
    if (!any) {
      return absl::InvalidArgumentError(absl::StrCat("--freeze=", absl::StrJoin(c.freeze, ","),
                                                     " freezes every parameter of --model=", c.model,
                                                     ": nothing would train"));
    }
  }
  return absl::OkStatus();
}

std::string ConvolutionKernelsNote(const TrainerConfig& c) {
  if (c.model != "cnn") return "";
  std::string note = ", convolutions " + (c.device.is_cpu() ? Conv2d::CpuKernels() : Conv2d::CudaKernels());
  // oneDNN 2.6 has no f16 convolution on the CPU (nor does PyTorch's CPU
  // autocast): Conv2d runs its fallback there.
  if (c.amp && c.precision.compute_dtype == DType::kF16 && c.device.is_cpu()) {
    note += ", f16 through im2col + BLAS (--amp=bf16 runs oneDNN)";
  } else if (c.amp) {
    note += absl::StrCat(", ", DTypeName(c.precision.compute_dtype), " operands with f32 accumulation");
  }
  return note;
}

absl::Status CheckModelFlags(const TrainerConfig& c) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Module> model, MakeModel(c.model, c.seed, DType::kF32, Device::Cpu()));
  return FreezeParameters(c, *model);
}

absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizerFor(const TrainerConfig& c,
                                                            std::vector<NamedParameter> params) {
  if (c.optimizer == "sgd") {
    SgdOptions options;
    options.lr = c.lr;
    options.momentum = c.momentum;
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> sgd, Sgd::Create(std::move(params), options));
    return std::unique_ptr<Optimizer>(std::move(sgd));
  }
  AdamOptions options = c.optimizer == "adamw" ? AdamWOptions() : AdamOptions();
  options.lr = c.lr;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Adam> adam, Adam::Create(std::move(params), options));
  return std::unique_ptr<Optimizer>(std::move(adam));
}

absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const TrainerConfig& c, Module& model) {
  return MakeOptimizerFor(c, model.NamedParameters());
}

absl::StatusOr<GradScaler> MakeGradScaler(const TrainerConfig& c) {
  GradScalerOptions options;
  options.enabled = c.amp && NeedsLossScaling(c.precision);
  return GradScaler::Create(options);
}

}  // namespace lockstep
