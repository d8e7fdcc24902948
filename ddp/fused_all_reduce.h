// Fused ("bucketed") all-reduce of many tensors, as Horovod's tensor fusion
// and DDP's buckets: tensors are packed into flat GradBuckets
// (ddp/grad_bucket.h) by PyTorch's rule (ddp/bucket_assignment.h: a bucket of one dtype and device closes once it
// reaches `bucket_cap_bytes`, so its last tensor may take it past the cap),
// one asynchronous all-reduce is launched per bucket as soon as it is
// packed, and results are unpacked back into the tensors.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(auto fused,
//       FusedAllReduce::Start(comm, grads, ReduceOp::kAvg, /*bucket_cap_bytes=*/25 << 20));
//   ...                                  // overlap
//   LOCKSTEP_RETURN_IF_ERROR(fused->Wait());  // every tensor now holds the result
//
// Reusable outside DDP. The tensors must stay alive and untouched until
// Wait() returns. Results equal one AllReduce per tensor; for floats, a
// bucket may be large enough to take the ring while a lone tensor would take
// recursive doubling, so sums can differ in the last bit (as in NCCL).
// Every rank still gets bit-identical results.
#ifndef LOCKSTEP_DDP_FUSED_ALL_REDUCE_H_
#define LOCKSTEP_DDP_FUSED_ALL_REDUCE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "collectives/work.h"
#include "core/tensor.h"
#include "ddp/grad_bucket.h"

namespace lockstep {

class FusedAllReduce {
 public:
  static absl::StatusOr<std::unique_ptr<FusedAllReduce>> Start(Communicator& comm, std::vector<Tensor> tensors,
                                                               ReduceOp op, size_t bucket_cap_bytes);

  // Waits for every bucket and copies the results into the tensors.
  absl::Status Wait();

  // The buckets, as indices into the tensors (for tests and tracing).
  const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }

 private:
  FusedAllReduce() = default;

  std::vector<std::vector<size_t>> buckets_;
  std::vector<GradBucket> grad_buckets_;  // Hold the tensors and flat buffers.
  std::vector<std::shared_ptr<Work>> works_;
  bool waited_ = false;
};

}  // namespace lockstep

#endif  // LOCKSTEP_DDP_FUSED_ALL_REDUCE_H_
