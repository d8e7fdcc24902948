// DataParallel: one process drives several devices. Each forward scatters
// the batch over the devices, refreshes a replica of the module on each,
// runs the replicas at once on per-device worker threads and gathers the
// outputs on one device; backward scatters the output gradient, runs the
// replicas' backward at once and sums their gradients into the module, in
// replica order (torch.nn.DataParallel, PyTorch 1.13).
//
//   DataParallelOptions options;
//   options.device_ids = {Device::Cpu(0), Device::Cpu(1)};
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<DataParallel> dp, DataParallel::Create(*model, options));
//   for (...) {
//     LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, dp->Forward(images));  // on cpu:0
//     LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult loss, CrossEntropy(logits, labels));
//     LOCKSTEP_RETURN_IF_ERROR(dp->Backward(loss.grad_logits).status());  // model's grads = sum
//     LOCKSTEP_RETURN_IF_ERROR(optimizer->Step());
//     LOCKSTEP_RETURN_IF_ERROR(model->ZeroGrad());
//   }
//
// As PyTorch:
//   * The module's parameters and buffers must be on device_ids[0]
//     (checked by Create and by every Forward, with PyTorch's message).
//   * Chunks follow torch.chunk (dp/scatter_gather.h): a batch of N over k
//     devices gives ceil(N / ceil(N / k)) chunks, so a batch smaller than the
//     device count uses only the first N devices.
//   * One device: the module itself runs (no replica, no worker thread), on
//     the input moved to device_ids[0]; its output stays there (PyTorch
//     returns the module's output as is, ignoring output_device).
//   * Gradients: replica i's gradients are summed in replica order on
//     device_ids[0] (g0 + g1 + ... as ReduceAddCoalesced) and the sum is
//     accumulated into the module's gradients: deterministic, and the
//     module's gradients equal what one device computes on the whole batch
//     up to the rounding of a split sum.
//   * Buffers (BatchNorm running statistics): PyTorch's replica 0 shares
//     the module's buffers (broadcast_coalesced hands the source device its
//     own tensors), so only chunk 0's statistics reach the module and the
//     other replicas' updates are dropped. Here every replica is a copy and,
//     after a forward in which all replicas succeeded, replica 0's buffers
//     are copied into the module: the same values, and a failed step leaves
//     the module untouched.
//   * Replicas are refreshed from the module at every forward (PyTorch
//     replicates every step), so optimizer steps between forwards are seen.
//     Modules' extra state (dropout counters) is copied to the replicas and
//     replica 0's is copied back, like buffers.
// Our own checks where PyTorch fails obscurely or not at all: an empty
// device list (PyTorch: IndexError), a device listed twice (PyTorch: not
// checked), devices of mixed types.
//
// Errors from a replica name it and its device ("replica 1 on device cpu:1:
// ...") and leave the module unchanged: its parameters, buffers and
// gradients are written only after every replica succeeded.
//
// The module's gradient-ready hook does not fire (gradients are reduced
// after the replicas' backward, not per parameter). State dicts are the
// plain module's (no "module." prefix); LoadStateDict accepts both forms
// (nn/checkpoint/state_dict_prefix.h).
#ifndef LOCKSTEP_DP_DATA_PARALLEL_H_
#define LOCKSTEP_DP_DATA_PARALLEL_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device.h"
#include "core/tensor.h"
#include "dp/parallel_apply.h"
#include "nn/module.h"

namespace lockstep {

struct DataParallelOptions {
  // nullopt: every CUDA device; without CUDA devices, the device of the
  // module's first parameter (PyTorch without GPUs just calls the module).
  std::optional<std::vector<Device>> device_ids;
  std::optional<Device> output_device;  // nullopt: device_ids[0]
  int64_t dim = 0;                      // the batch dimension
};

// One phase of a step, for traces: "scatter", "replicate", "apply",
// "gather" in forward; "scatter", "apply", "reduce" and, with an input
// gradient, "gather" in backward.
struct DpPhaseTiming {
  const char* phase;
  bool backward;
  int replicas;  // replicas in use this step
  std::chrono::steady_clock::time_point start;
  std::chrono::steady_clock::time_point end;
};

// The devices DataParallelOptions::device_ids = nullopt means for `module`.
std::vector<Device> DefaultDataParallelDevices(Module& module);

class DataParallel {
 public:
  // `module` must outlive the returned object. Errors: an empty or
  // duplicated device list, mixed device types, an output device of another
  // type, parameters or buffers not on device_ids[0].
  static absl::StatusOr<std::unique_ptr<DataParallel>> Create(Module& module, DataParallelOptions options = {});

  // The output for the whole batch, on output_device.
  absl::StatusOr<Tensor> Forward(const Tensor& input);
  // Backward of the last Forward: on success the module's gradients have
  // been increased by the sum of the replicas' gradients. Returns the
  // input's gradient on the input's device when input_grad, else an
  // undefined tensor (data needs none).
  absl::StatusOr<Tensor> Backward(const Tensor& grad_output, bool input_grad = false);

  Module& module() { return module_; }
  const std::vector<Device>& device_ids() const { return device_ids_; }
  Device output_device() const { return output_device_; }
  int64_t dim() const { return dim_; }

  // The plain module's state dict, and loading with or without "module.".
  std::vector<NamedTensor> StateDict() { return module_.StateDict(); }
  absl::Status LoadStateDict(const std::vector<NamedTensor>& state, bool strict = true);

  // Called on the calling thread after each phase (null: none).
  void SetPhaseObserver(std::function<void(const DpPhaseTiming&)> observer) { observer_ = std::move(observer); }

 private:
  DataParallel(Module& module, std::vector<Device> device_ids, Device output_device, int64_t dim,
               std::unique_ptr<DeviceWorkers> workers);

  absl::Status CheckModuleDevice();
  absl::Status RefreshReplicas(size_t n);
  absl::Status ReduceGradients(size_t n);
  void Report(const char* phase, bool backward, std::chrono::steady_clock::time_point start);

  Module& module_;
  const std::vector<Device> device_ids_;
  const Device output_device_;
  const int64_t dim_;
  std::unique_ptr<DeviceWorkers> workers_;         // null with one device
  std::vector<std::unique_ptr<Module>> replicas_;  // made on first use, per device
  std::function<void(const DpPhaseTiming&)> observer_;

  // The pending forward: how the batch was split and where it came from.
  bool pending_ = false;
  std::vector<int64_t> chunk_sizes_;
  Device input_device_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_DP_DATA_PARALLEL_H_
