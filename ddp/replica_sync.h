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

// distributed.py's broadcast_bucket_size: the most bytes one coalesced
// broadcast carries.
inline constexpr size_t kBroadcastBucketBytes = size_t{250} << 20;

// Broadcasts every tensor from rank 0 coalesced, as PyTorch's
// _broadcast_coalesced: tensors of one dtype are packed into flat buckets of
// at most `bucket_bytes` (a larger tensor goes alone, without a copy), one
// broadcast per bucket, all launched before any is awaited, and unpacked on
// the other ranks. DDP calls it for the parameters and buffers at
// construction and for the buffers before each forward, so a model with many
// small buffers (BatchNorm's three per layer) pays one broadcast, not three
// per layer.
absl::Status BroadcastFromRankZero(Communicator& comm, const std::vector<Tensor>& tensors,
                                   size_t bucket_bytes = kBroadcastBucketBytes);
// The same from rank `src` (Join's final model sync and its buffer
// broadcasts come from the authoritative rank).
absl::Status BroadcastCoalesced(Communicator& comm, const std::vector<Tensor>& tensors, int src,
                                size_t bucket_bytes = kBroadcastBucketBytes);

}  // namespace lockstep

#endif  // LOCKSTEP_DDP_REPLICA_SYNC_H_
