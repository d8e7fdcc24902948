// DdpOptions: DistributedDataParallel's options, PyTorch's names and
// defaults, shared by the DDP front ends (ddp/distributed_data_parallel.h
// for lockstep's nn, interop/torch/ddp/distributed_data_parallel.h for
// libtorch), and their translation into the reducer's.
#ifndef LOCKSTEP_DDP_DDP_OPTIONS_H_
#define LOCKSTEP_DDP_DDP_OPTIONS_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "ddp/reducer.h"

namespace lockstep {

struct DdpOptions {
  double bucket_cap_mb = 25;
  // The first rebuilt bucket's limit (PyTorch's module-level
  // dist._DEFAULT_FIRST_BUCKET_BYTES, 1 MiB): small, so that the last
  // gradients do not wait behind a full bucket.
  size_t first_bucket_bytes = size_t{1} << 20;
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  bool broadcast_buffers = true;
  bool static_graph = false;
  // For a group that outlives a lost member (collectives/elastic/elastic_group.h,
  // trainers/fault_tolerant_loop.h): a reduction that fails leaves every
  // gradient zero, never a partial sum another rank's death cut short, so
  // no optimizer can step on it; the DDP then refuses every call, and a new
  // one is built over the re-formed group. Without it a failed reduction
  // leaves the gradients as they were when it failed.
  bool fault_tolerant = false;
};

// The reducer's options (bucket_cap_bytes = int(bucket_cap_mb * 2^20), as
// PyTorch); InvalidArgument for a bucket_cap_mb that is not a positive
// number.
absl::StatusOr<ReducerOptions> ToReducerOptions(const DdpOptions& options);

}  // namespace lockstep

#endif  // LOCKSTEP_DDP_DDP_OPTIONS_H_
