// What DDP does to make the replicas one model before training: compare
// every rank's parameter list (count, dtypes, shapes) and fail on every rank
// with PyTorch's kind of message when they differ; then broadcast rank 0's
// parameters and buffers (PyTorch's _verify_param_shape_across_processes
// and _sync_module_states). Shared by the DDP front ends (lockstep's nn and
// libtorch's).
#ifndef LOCKSTEP_DDP_REPLICA_SYNC_H_
#define LOCKSTEP_DDP_REPLICA_SYNC_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "collectives/communicator.h"
#include "core/tensor.h"

namespace lockstep {

// InvalidArgument naming the first parameter (index and `names[i]`) whose
// dtype or shape differs from another rank's, or the counts.
absl::Status VerifyShapesAcrossRanks(Communicator& comm, const std::vector<Tensor>& params,
                                     const std::vector<std::string>& names);

// Broadcasts every tensor from rank 0, all launched before any is awaited.
absl::Status BroadcastFromRankZero(Communicator& comm, const std::vector<Tensor>& tensors);

}  // namespace lockstep

#endif  // LOCKSTEP_DDP_REPLICA_SYNC_H_
