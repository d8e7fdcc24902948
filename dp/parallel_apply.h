// parallel_apply: replica i runs on input i on device i's worker thread, all
// at once (torch.nn.parallel.parallel_apply), for forward and backward.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<DeviceWorkers> workers,
//                             DeviceWorkers::Create({Device::Cpu(0), Device::Cpu(1)}));
//   LOCKSTEP_ASSIGN_OR_RETURN(std::vector<Tensor> outputs,
//                             ParallelApply(*workers, replica_pointers, chunks));
//   ...
//   LOCKSTEP_ASSIGN_OR_RETURN(std::vector<Tensor> input_grads,
//                             ParallelBackward(*workers, replica_pointers, output_grads, false));
//
// Workers are persistent: one thread per device, made once (PyTorch starts a
// thread per replica per call; a wake-up is ~10 us, a thread start ~50 us).
// Replica i always runs on worker i, so per-thread state (a cuBLAS handle
// per device and thread) is made once. Fewer replicas than workers is fine
// (a batch smaller than the device count); the extra workers idle.
//
// Errors: every replica runs to completion, then the first error in replica
// order is returned, its code kept and its message prefixed with
// "replica <i> on device <d>: " (PyTorch: "Caught ... in replica i on device
// d"). The replicas' own state is whatever their failed calls left; callers
// (DataParallel) keep the master module out of it.
#ifndef LOCKSTEP_DP_PARALLEL_APPLY_H_
#define LOCKSTEP_DP_PARALLEL_APPLY_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/device.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "nn/module.h"

namespace lockstep {

class DeviceWorkers {
 public:
  // One worker thread per device. An error for an empty list or a device
  // listed twice (two workers would race on one replica's device state).
  static absl::StatusOr<std::unique_ptr<DeviceWorkers>> Create(std::vector<Device> devices);
  DeviceWorkers(const DeviceWorkers&) = delete;
  DeviceWorkers& operator=(const DeviceWorkers&) = delete;

  const std::vector<Device>& devices() const { return devices_; }

  // Runs task(i) on worker i for every i < n (n <= devices().size()) and
  // returns when all have finished: OK, or the first error by index, named
  // as above. Not reentrant: one Run at a time per DeviceWorkers.
  absl::Status Run(size_t n, const std::function<absl::Status(size_t)>& task);

 private:
  explicit DeviceWorkers(std::vector<Device> devices);

  std::vector<Device> devices_;
  std::vector<std::unique_ptr<ThreadPool>> workers_;  // one thread each
};

// outputs[i] = replicas[i]->Forward(inputs[i]) on worker i. The spans must
// have the same length, at most workers.devices().size().
absl::StatusOr<std::vector<Tensor>> ParallelApply(DeviceWorkers& workers, absl::Span<Module* const> replicas,
                                                  absl::Span<const Tensor> inputs);

// input_grads[i] = replicas[i]->Backward(grad_outputs[i], input_grad) on
// worker i (undefined tensors when !input_grad). Gradient-ready hooks of the
// replicas run on their workers.
absl::StatusOr<std::vector<Tensor>> ParallelBackward(DeviceWorkers& workers, absl::Span<Module* const> replicas,
                                                     absl::Span<const Tensor> grad_outputs, bool input_grad);

}  // namespace lockstep

#endif  // LOCKSTEP_DP_PARALLEL_APPLY_H_
