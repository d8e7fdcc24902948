// Replicate: copies of a module's parameters and buffers on other devices
// (torch.nn.parallel.replicate), and the refresh that DataParallel does
// before every forward instead of building new modules.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Module>> replicas,
//                             Replicate(*model, {Device::Cpu(0), Device::Cpu(1)}));
//   ... optimizer step on *model ...
//   for (auto& r : replicas) LOCKSTEP_RETURN_IF_ERROR(CopyStateTo(*model, *r));
//
// Replicas are deep copies made with Module::CloneTo: same structure, names
// and training mode, values copied, no gradients, no hook, no pending
// forward. PyTorch's replicate builds module copies every step whose
// parameters are broadcast copies; keeping the copies and overwriting their
// values (CopyStateTo) gives the same values without rebuilding modules.
// Copies complete before returning (CUDA copies go through Tensor::CopyFrom,
// which synchronizes; core has no per-device copy streams to overlap them).
#ifndef LOCKSTEP_DP_REPLICATE_H_
#define LOCKSTEP_DP_REPLICATE_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/device.h"
#include "nn/module.h"

namespace lockstep {

// One deep copy of `module` per device, in order. An error naming the device
// when a copy cannot be made (e.g. a layer without kernels for it).
absl::StatusOr<std::vector<std::unique_ptr<Module>>> Replicate(const Module& module, absl::Span<const Device> devices);

// Overwrites `replica`'s parameters and buffers with `source`'s values and
// gives it `source`'s training mode; `replica` must have been made from
// `source` (same state-dict names, shapes and dtypes; checked, nothing is
// written on a mismatch). Gradients are left alone.
absl::Status CopyStateTo(Module& source, Module& replica);

}  // namespace lockstep

#endif  // LOCKSTEP_DP_REPLICATE_H_
