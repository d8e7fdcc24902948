#include "dp/data_parallel.h"

#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/cuda/cuda_runtime.h"
#include "core/kernels.h"
#include "core/status.h"
#include "dp/balance.h"
#include "dp/replicate.h"
#include "dp/scatter_gather.h"
#include "nn/checkpoint/state_dict_prefix.h"

namespace lockstep {
namespace {

using Clock = std::chrono::steady_clock;

// dst += src, moving src to dst's device first when it lives elsewhere
// (cpu:1 -> cpu:0 is a host copy, as reduce_add copies to the target GPU).
absl::Status AddInto(const Tensor& dst, const Tensor& src) {
  if (src.device() == dst.device()) return ReduceInto(ReduceOp::kSum, src, dst);
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor moved, src.To(dst.device()));
  return ReduceInto(ReduceOp::kSum, moved, dst);
}

}  // namespace

std::vector<Device> DefaultDataParallelDevices(Module& module) {
  std::vector<Device> devices;
  for (int i = 0; i < cuda::DeviceCount(); ++i) devices.push_back(Device::Cuda(i));
  if (!devices.empty()) return devices;
  for (const NamedParameter& p : module.NamedParameters()) return {p.parameter->value.device()};
  return {Device::Cpu()};
}

absl::StatusOr<std::unique_ptr<DataParallel>> DataParallel::Create(Module& module, DataParallelOptions options) {
  std::vector<Device> devices = options.device_ids ? *options.device_ids : DefaultDataParallelDevices(module);
  if (devices.empty()) {
    // PyTorch indexes device_ids[0] and raises IndexError.
    return absl::InvalidArgumentError(
        "DataParallel: device_ids is empty; list at least one device, or leave it unset for every "
        "CUDA device");
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i].type() != devices[0].type()) {
      return absl::InvalidArgumentError(absl::StrCat("DataParallel: device_ids mixes device types (",
                                                     devices[0].ToString(), " and ", devices[i].ToString(),
                                                     "); use devices of one type"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (devices[i] == devices[j]) {
        // PyTorch does not check; two replicas on one device would share its worker.
        return absl::InvalidArgumentError(absl::StrCat("DataParallel: device ", devices[i].ToString(),
                                                       " is listed twice in device_ids (positions ", j, " and ", i,
                                                       "); list each device once"));
      }
    }
  }
  const Device output_device = options.output_device.value_or(devices[0]);
  if (output_device.type() != devices[0].type()) {
    return absl::InvalidArgumentError(absl::StrCat("DataParallel: output_device ", output_device.ToString(),
                                                   " is not a ", devices[0].is_cpu() ? "CPU" : "CUDA",
                                                   " device like device_ids"));
  }
  if (options.dim < 0) {
    return absl::InvalidArgumentError(absl::StrCat("DataParallel: dim must be >= 0, got ", options.dim));
  }
  if (devices.size() > 1 && devices[0].is_cuda()) {
    // PyTorch warns (and goes on) when one GPU would hold the others back.
    std::vector<int> ids;
    std::vector<cuda::DeviceProperties> properties;
    for (const Device& d : devices) {
      absl::StatusOr<cuda::DeviceProperties> p = cuda::GetDeviceProperties(d.index());
      if (!p.ok()) return absl::Status(p.status().code(), absl::StrCat("DataParallel: ", p.status().message()));
      ids.push_back(d.index());
      properties.push_back(*p);
    }
    if (const std::string warning = ImbalanceWarning(ids, properties); !warning.empty()) {
      std::fprintf(stderr, "DataParallel: warning: %s\n", warning.c_str());
    }
  }
  std::unique_ptr<DeviceWorkers> workers;
  if (devices.size() > 1) {
    LOCKSTEP_ASSIGN_OR_RETURN(workers, DeviceWorkers::Create(devices));
  }
  std::unique_ptr<DataParallel> dp(
      new DataParallel(module, std::move(devices), output_device, options.dim, std::move(workers)));
  LOCKSTEP_RETURN_IF_ERROR(dp->CheckModuleDevice());
  return dp;
}

DataParallel::DataParallel(Module& module, std::vector<Device> device_ids, Device output_device, int64_t dim,
                           std::unique_ptr<DeviceWorkers> workers)
    : module_(module),
      device_ids_(std::move(device_ids)),
      output_device_(output_device),
      dim_(dim),
      workers_(std::move(workers)) {}

absl::Status DataParallel::CheckModuleDevice() {
  const Device source = device_ids_[0];
  auto wrong = [&](const Tensor& t) {
    return absl::InvalidArgumentError(
        absl::StrCat("module must have its parameters and buffers on device ", source.ToString(),
                     " (device_ids[0]) but found one of them on device: ", t.device().ToString()));
  };
  for (const NamedParameter& p : module_.NamedParameters()) {
    if (p.parameter->value.device() != source) return wrong(p.parameter->value);
  }
  for (const NamedTensor& b : module_.NamedBuffers()) {
    if (b.second.device() != source) return wrong(b.second);
  }
  return absl::OkStatus();
}

void DataParallel::Report(const char* phase, bool backward, Clock::time_point start) {
  if (!observer_) return;
  observer_(DpPhaseTiming{phase, backward, static_cast<int>(chunk_sizes_.size()), start, Clock::now()});
}

absl::Status DataParallel::RefreshReplicas(size_t n) {
  const std::map<std::string, std::string> extra = module_.ExtraState();
  for (size_t i = 0; i < n; ++i) {
    if (i >= replicas_.size()) {
      LOCKSTEP_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Module>> made, Replicate(module_, {device_ids_[i]}));
      replicas_.push_back(std::move(made[0]));
    }
    Module& replica = *replicas_[i];
    LOCKSTEP_RETURN_IF_ERROR(CopyStateTo(module_, replica));
    if (!extra.empty()) LOCKSTEP_RETURN_IF_ERROR(replica.LoadExtraState(extra));
    // Each backward's gradients alone; the module keeps the accumulation.
    LOCKSTEP_RETURN_IF_ERROR(replica.ZeroGrad());
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> DataParallel::Forward(const Tensor& input) {
  LOCKSTEP_RETURN_IF_ERROR(CheckModuleDevice());
  pending_ = false;
  if (!input.defined()) return absl::InvalidArgumentError("DataParallel.Forward: undefined input");
  input_device_ = input.device();
  const std::vector<Device>& devices = device_ids_;
  if (devices.size() == 1) {  // PyTorch's fast path: the module itself
    Tensor x = input;
    if (x.device() != devices[0]) {
      LOCKSTEP_ASSIGN_OR_RETURN(x, input.To(devices[0]));
    }
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor out, module_.Forward(x));
    chunk_sizes_ = {input.dim() > dim_ ? input.shape()[dim_] : 0};
    pending_ = true;
    return out;
  }

  Clock::time_point t = Clock::now();
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<Tensor> chunks, Scatter(input, devices, dim_));
  chunk_sizes_.clear();
  for (const Tensor& c : chunks) chunk_sizes_.push_back(c.shape()[dim_]);
  const size_t n = chunks.size();
  Report("scatter", false, t);

  t = Clock::now();
  LOCKSTEP_RETURN_IF_ERROR(RefreshReplicas(n));
  Report("replicate", false, t);

  t = Clock::now();
  std::vector<Module*> replicas;
  for (size_t i = 0; i < n; ++i) replicas.push_back(replicas_[i].get());
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, ParallelApply(*workers_, replicas, chunks));
  Report("apply", false, t);

  t = Clock::now();
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor out, Gather(outputs, output_device_, dim_));
  // Every replica succeeded: replica 0's buffers (and extra state) become the
  // module's, as PyTorch's replica 0 shares them (see the header).
  std::vector<NamedTensor> master_buffers = module_.NamedBuffers();
  std::vector<NamedTensor> replica_buffers = replicas_[0]->NamedBuffers();
  for (size_t b = 0; b < master_buffers.size(); ++b) {
    LOCKSTEP_RETURN_IF_ERROR(master_buffers[b].second.CopyFrom(replica_buffers[b].second));
  }
  const std::map<std::string, std::string> extra = replicas_[0]->ExtraState();
  if (!extra.empty()) LOCKSTEP_RETURN_IF_ERROR(module_.LoadExtraState(extra));
  Report("gather", false, t);
  pending_ = true;
  return out;
}

absl::Status DataParallel::ReduceGradients(size_t n) {
  std::vector<std::vector<Parameter*>> per_replica;
  for (size_t i = 0; i < n; ++i) per_replica.push_back(replicas_[i]->Parameters());
  std::vector<Parameter*> master = module_.Parameters();
  for (size_t k = 0; k < master.size(); ++k) {
    // g0 + g1 + ... in replica order, in replica 0's own gradient (it is
    // zeroed before the next backward), then into the module's.
    Tensor sum;
    for (size_t i = 0; i < n; ++i) {
      const Tensor& g = per_replica[i][k]->grad;
      if (!g.defined()) continue;
      if (!sum.defined()) {
        if (g.device() == master[k]->value.device()) {
          sum = g;
        } else {
          LOCKSTEP_ASSIGN_OR_RETURN(sum, g.To(master[k]->value.device()));
        }
        continue;
      }
      LOCKSTEP_RETURN_IF_ERROR(AddInto(sum, g));
    }
    if (!sum.defined()) continue;  // no replica used this parameter
    if (!master[k]->grad.defined()) {
      LOCKSTEP_ASSIGN_OR_RETURN(master[k]->grad, sum.Clone());  // PyTorch stores the sum itself
    } else {
      LOCKSTEP_RETURN_IF_ERROR(ReduceInto(ReduceOp::kSum, sum, master[k]->grad));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> DataParallel::Backward(const Tensor& grad_output, bool input_grad) {
  if (!pending_) {
    return absl::FailedPreconditionError("DataParallel.Backward: no pending Forward (one Backward per Forward)");
  }
  pending_ = false;
  if (device_ids_.size() == 1) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor grad_in, module_.Backward(grad_output, input_grad));
    if (input_grad && grad_in.defined() && grad_in.device() != input_device_) {
      return grad_in.To(input_device_);
    }
    return grad_in;
  }
  const size_t n = chunk_sizes_.size();
  Clock::time_point t = Clock::now();
  LOCKSTEP_ASSIGN_OR_RETURN(
      std::vector<Tensor> grads,
      ScatterSizes(grad_output, chunk_sizes_, absl::MakeConstSpan(device_ids_).subspan(0, n), dim_));
  Report("scatter", true, t);

  t = Clock::now();
  std::vector<Module*> replicas;
  for (size_t i = 0; i < n; ++i) replicas.push_back(replicas_[i].get());
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<Tensor> input_grads, ParallelBackward(*workers_, replicas, grads, input_grad));
  Report("apply", true, t);

  t = Clock::now();
  LOCKSTEP_RETURN_IF_ERROR(ReduceGradients(n));
  Report("reduce", true, t);
  if (!input_grad) return Tensor();
  t = Clock::now();
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor grad_in, Gather(input_grads, input_device_, dim_));
  Report("gather", true, t);
  return grad_in;
}

absl::Status DataParallel::LoadStateDict(const std::vector<NamedTensor>& state, bool strict) {
  return LoadStateDictAcceptingWrapperPrefix(module_, state, strict);
}

}  // namespace lockstep
