// The one place that knows which PyTorch interop/torch/c10d is compiled
// against; everything else is one source for both.
//
//   PyTorch 1.13: a plugin is a c10d::ProcessGroup subclass; the creator's
//     result is the group. Backend.register_backend(name, func, extended_api).
//   PyTorch 2.x:  a plugin is a c10d::Backend subclass that PyTorch's own
//     ProcessGroup holds per device type; register_backend also takes
//     devices=[...] (a list: some 2.x releases iterate a string character
//     by character), and DDP and dist._coalescing_manager may call
//     startCoalescing()/endCoalescing(), which Backend's defaults refuse.
//
// Both have the same 21 collective and point-to-point virtuals with the
// same signatures (ProcessGroupLockstep overrides those), and both pass
// c10d::DistributedBackendOptions (the group's store, rank, size, timeout,
// name and global ranks) to a creator registered with extended_api=True.
#ifndef LOCKSTEP_INTEROP_TORCH_C10D_TORCH_VERSION_H_
#define LOCKSTEP_INTEROP_TORCH_C10D_TORCH_VERSION_H_

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#define LOCKSTEP_TORCH_BACKEND_API 1
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#define LOCKSTEP_TORCH_BACKEND_API 0
#endif

namespace lockstep {

#if LOCKSTEP_TORCH_BACKEND_API
using TorchBackendBase = ::c10d::Backend;
#else
using TorchBackendBase = ::c10d::ProcessGroup;
#endif

// What PyTorch the backend was built against: "1.13.0".
inline constexpr const char* kTorchBuildVersion = TORCH_VERSION;

}  // namespace lockstep

#endif  // LOCKSTEP_INTEROP_TORCH_C10D_TORCH_VERSION_H_
