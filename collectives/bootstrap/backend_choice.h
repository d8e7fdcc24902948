// Which backend a rank's Communicator should use: NCCL or the host
// algorithms (TCP / shared memory, CUDA tensors staged through pinned host
// memory).
//
//   BackendChoiceInput in;
//   in.device = Device::Cuda(local_rank);
//   in.nccl_version = LinkedNcclVersion();         // collectives/nccl/nccl_communicator.h
//   in.visible_gpus = cuda::DeviceCount();
//   in.local_world_size = env.local_world_size;
//   in.requested = absl::GetFlag(FLAGS_backend);   // "", "auto", "nccl", "host"
//   in.environment = BackendFromEnvironment();     // LOCKSTEP_BACKEND
//   LOCKSTEP_ASSIGN_OR_RETURN(BackendChoice choice, ChooseBackend(in));
//   // choice.kind, and choice.reason for the log.
//
// The rule ("auto"): NCCL when the rank's tensors are on a CUDA device, the
// build and the machine have NCCL (>= 2.7, for send/recv), and each local
// rank has its own GPU (local_world_size <= visible GPUs: NCCL refuses two
// ranks on one GPU); the host backend otherwise (CPU tensors, no NCCL,
// several ranks per GPU). A request forces a backend: the flag wins over
// LOCKSTEP_BACKEND; forcing NCCL where it cannot work is an error that says
// why, instead of a hang or NCCL's own message later.
#ifndef LOCKSTEP_COLLECTIVES_BOOTSTRAP_BACKEND_CHOICE_H_
#define LOCKSTEP_COLLECTIVES_BOOTSTRAP_BACKEND_CHOICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device.h"

namespace lockstep {

enum class BackendKind { kHost, kNccl };

// "host", "nccl".
absl::string_view BackendKindName(BackendKind kind);

struct BackendChoiceInput {
  std::string requested;     // Flag: "", "auto", "host" or "nccl" (wins).
  std::string environment;   // LOCKSTEP_BACKEND: same values.
  Device device;             // Where this rank's tensors live.
  int nccl_version = 0;      // The linked NCCL (ncclGetVersion); 0: none.
  int visible_gpus = 0;      // CUDA devices this rank sees.
  int local_world_size = 1;  // Ranks on this host.
};

struct BackendChoice {
  BackendKind kind = BackendKind::kHost;
  std::string reason;  // One line, for the log: why this backend.
};

absl::StatusOr<BackendChoice> ChooseBackend(const BackendChoiceInput& input);

// The value of LOCKSTEP_BACKEND ("" when unset).
std::string BackendFromEnvironment();

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_BOOTSTRAP_BACKEND_CHOICE_H_
