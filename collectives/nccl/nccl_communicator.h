// A Communicator whose operations run on NCCL (collectives/nccl/nccl_backend.h):
// CUDA tensors, one rank per GPU, met through a Store.
//
//   NcclCommunicatorOptions options;
//   options.communicator.timeout = Milliseconds(60000);
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
//       CreateNcclCommunicator(store, rank, world_size, Device::Cuda(local_rank), options));
//
// Rank 0 makes NCCL's unique id and sets it in the store under
// `<store_prefix>/nccl_unique_id/<n>`; the others read it (waiting at most
// `init_timeout`). n counts the communicators each rank made with this
// store and prefix (a per-rank counter in the store), so a group made again
// at a store that outlived the last one (a restart under a launcher's
// store, a second communicator) never joins a stale id; all ranks must make
// their communicators in the same order. With NCCL >= 2.14 (checked at run time: the machine's
// libnccl may differ from the build's) the communicator is made without
// blocking, so a rank that never comes makes init fail at `init_timeout`
// instead of hanging; older NCCL blocks in init. Several ranks on one GPU
// are refused by NCCL: the error says to use the host backend (see
// collectives/bootstrap/backend_choice.h, which picks for you).
#ifndef LOCKSTEP_COLLECTIVES_NCCL_NCCL_COMMUNICATOR_H_
#define LOCKSTEP_COLLECTIVES_NCCL_NCCL_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "collectives/nccl/nccl_api.h"
#include "collectives/nccl/nccl_backend.h"
#include "collectives/store/store.h"
#include "core/device.h"

namespace lockstep {

struct NcclCommunicatorOptions {
  CommunicatorOptions communicator;  // Deadlines, debug checks, Work.
  NcclBackendOptions backend;        // Caller stream, watchdog interval.
  // How long rank r > 0 waits for the unique id, and init for all ranks. > 0.
  Milliseconds init_timeout = Milliseconds(300000);
  // Namespace of this group's keys in the store (several groups, restarts).
  std::string store_prefix = "nccl";
};

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(std::shared_ptr<Store> store, int rank, int size,
                                                                     Device device,
                                                                     const NcclCommunicatorOptions& options);

// The NCCL this binary runs with (ncclGetVersion; 0 in a build without
// CUDA), for collectives/bootstrap/backend_choice.h.
int LinkedNcclVersion();

// The backend alone, over a given runtime (tests pass a fake); `store` is
// already prefixed.
absl::StatusOr<std::unique_ptr<NcclBackend>> CreateNcclBackend(NcclRuntime& runtime, Store& store, int rank, int size,
                                                               Device device, const NcclCommunicatorOptions& options);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_NCCL_NCCL_COMMUNICATOR_H_
