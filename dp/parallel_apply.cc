#include "dp/parallel_apply.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<DeviceWorkers>> DeviceWorkers::Create(std::vector<Device> devices) {
  if (devices.empty()) return absl::InvalidArgumentError("DeviceWorkers: the device list is empty");
  for (size_t i = 0; i < devices.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (devices[i] == devices[j]) {
        return absl::InvalidArgumentError(absl::StrCat("DeviceWorkers: device ", devices[i].ToString(),
                                                       " is listed twice (positions ", j, " and ", i,
                                                       "); list each device once"));
      }
    }
  }
  return std::unique_ptr<DeviceWorkers>(new DeviceWorkers(std::move(devices)));
}

DeviceWorkers::DeviceWorkers(std::vector<Device> devices) : devices_(std::move(devices)) {
  for (size_t i = 0; i < devices_.size(); ++i) workers_.push_back(std::make_unique<ThreadPool>(1));
}

absl::Status DeviceWorkers::Run(size_t n, const std::function<absl::Status(size_t)>& task) {
  if (n > workers_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceWorkers::Run: ", n, " tasks for ", workers_.size(), " devices"));
  }
  std::vector<absl::Status> results(n);
  // Each task writes only its own slot; ThreadPool::Wait orders the writes
  // before the reads below.
  for (size_t i = 0; i < n; ++i) {
    workers_[i]->Schedule([&task, &results, i] { results[i] = task(i); });
  }
  for (size_t i = 0; i < n; ++i) workers_[i]->Wait();
  for (size_t i = 0; i < n; ++i) {
    if (!results[i].ok()) {
      return absl::Status(results[i].code(), absl::StrCat("replica ", i, " on device ", devices_[i].ToString(), ": ",
                                                          results[i].message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> ParallelApply(DeviceWorkers& workers, absl::Span<Module* const> replicas,
                                                  absl::Span<const Tensor> inputs) {
  if (replicas.size() != inputs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ParallelApply: ", replicas.size(), " replicas but ", inputs.size(), " inputs"));
  }
  std::vector<Tensor> outputs(replicas.size());
  LOCKSTEP_RETURN_IF_ERROR(workers.Run(replicas.size(), [&](size_t i) -> absl::Status {
    LOCKSTEP_ASSIGN_OR_RETURN(outputs[i], replicas[i]->Forward(inputs[i]));
    return absl::OkStatus();
  }));
  return outputs;
}

absl::StatusOr<std::vector<Tensor>> ParallelBackward(DeviceWorkers& workers, absl::Span<Module* const> replicas,
                                                     absl::Span<const Tensor> grad_outputs, bool input_grad) {
  if (replicas.size() != grad_outputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("ParallelBackward: ", replicas.size(), " replicas but ",
                                                   grad_outputs.size(), " output gradients"));
  }
  std::vector<Tensor> input_grads(replicas.size());
  LOCKSTEP_RETURN_IF_ERROR(workers.Run(replicas.size(), [&](size_t i) -> absl::Status {
    LOCKSTEP_ASSIGN_OR_RETURN(input_grads[i], replicas[i]->Backward(grad_outputs[i], input_grad));
    return absl::OkStatus();
  }));
  return input_grads;
}

}  // namespace lockstep
