// Reducer: DistributedDataParallel's gradient bucketing and averaging
// (PyTorch 1.13's reducer.cpp), driven by gradient-ready hooks. One
// reducer serves every DDP front end (lockstep's nn modules,
// ddp/distributed_data_parallel.h, which states the rules it implements;
// libtorch modules, interop/torch): it sees the parameters only through
// GradSlots (ddp/grad_slots.h).
//
// One iteration:
//   PrepareForBackward()            // resets the per-iteration state
//   MarkReady(index) per gradient   // from the hook, in backward's order:
//                                   // copies into the bucket, launches full
//                                   // buckets in bucket order
//   FinalizeBackward()              // unused parameters, waits, writes back
//   RebuildBucketsIfNeeded()        // at the next forward (once)
#ifndef LOCKSTEP_DDP_REDUCER_H_
#define LOCKSTEP_DDP_REDUCER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "collectives/communicator.h"
#include "collectives/work.h"
#include "ddp/bucket_timing.h"
#include "ddp/comm_hook.h"
#include "ddp/grad_bucket.h"
#include "ddp/grad_slots.h"

namespace lockstep {

struct ReducerOptions {
  size_t bucket_cap_bytes = 25 << 20;
  size_t first_bucket_bytes = size_t{1} << 20;
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  bool static_graph = false;
};

class Reducer {
 public:
  // `params` in the module's parameter order, `names` parallel to it.
  static absl::StatusOr<std::unique_ptr<Reducer>> Create(std::unique_ptr<GradSlots> params,
                                                         std::vector<std::string> names, Communicator& comm,
                                                         ReducerOptions options);

  absl::Status SetCommHook(std::unique_ptr<CommHook> hook);
  void SetObserver(std::function<void(const BucketTiming&)> observer) { observer_ = std::move(observer); }

  // The error PyTorch raises at the next forward when the last backward did
  // not reduce every gradient; OK otherwise.
  absl::Status CheckPreviousIterationFinished() const;
  // After the first iteration (find_unused_parameters false, or
  // static_graph): buckets in the order gradients became ready on rank 0.
  absl::Status RebuildBucketsIfNeeded();

  void PrepareForBackward();
  absl::Status MarkReady(size_t index);
  absl::Status FinalizeBackward();

  std::vector<std::vector<size_t>> bucket_indices() const;

  // How long the last FinalizeBackward took, in seconds (0 before the
  // first): called once the local backward is done, it waits for the
  // buckets still in flight, reduces the unused parameters' map and copies
  // the averages back, so this is the reduction time backward did not hide
  // (the step's exposed communication). With CUDA buckets the host does not
  // wait (the stream does), so it is only the host's part.
  double last_finalize_seconds() const { return last_finalize_seconds_; }

  // Join (ddp/join.h). The divisor of this iteration's gradients without a
  // comm hook: the number of ranks that have not joined
  // (divide_by_initial_world_size false); 0 is the group's size. Reset by
  // FinalizeBackward. A comm hook divides by the group's size regardless,
  // as PyTorch's do.
  void SetDivideFactor(int divisor) { divide_factor_ = divisor; }
  // On a rank that has joined: the collectives of one backward of the
  // others, with zeros (PyTorch's _match_all_reduce_for_bwd_pass: each
  // bucket's all-reduce, through the comm hook if there is one, in bucket
  // order; _match_unused_params_allreduce: the used-parameter map as this
  // rank last had it, with find_unused_parameters; and
  // _push_all_rebuilt_params: the registration order as this rank's ready
  // order when the buckets are still to be rebuilt). Waits for them all.
  absl::Status ShadowBackward();

 private:
  struct Bucket {
    GradBucket grad_bucket;
    std::vector<size_t> params;  // Parameter indices, in the bucket's order.
    size_t pending = 0;
    std::shared_ptr<Work> work;
  };
  struct Location {
    size_t bucket;
    size_t member;
  };

  Reducer(std::unique_ptr<GradSlots> params, std::vector<std::string> names, Communicator& comm,
          ReducerOptions options);
  absl::Status InitializeBuckets(const std::vector<std::vector<size_t>>& buckets);
  absl::Status CopyGradIntoBucket(size_t index);
  absl::Status FinalizeBackwardImpl();
  void LaunchReadyBuckets();
  // Which parameters were used on any rank (find_unused_parameters).
  absl::Status ReduceUsedMap(std::vector<bool>* globally_used);

  const std::unique_ptr<GradSlots> params_;
  const std::vector<std::string> names_;
  Communicator& comm_;
  const ReducerOptions options_;
  std::unique_ptr<CommHook> hook_;
  std::function<void(const BucketTiming&)> observer_;
  double last_finalize_seconds_ = 0;

  std::vector<Bucket> buckets_;
  std::vector<Location> locations_;  // Per parameter.

  // Per iteration.
  std::vector<bool> ready_;
  std::vector<bool> locally_used_;
  size_t next_bucket_ = 0;
  bool expect_hooks_ = false;
  std::vector<std::string> unreduced_;  // Names whose gradient never came.

  // Bucket rebuilding: the ready order of the first iteration.
  bool has_rebuilt_buckets_ = false;
  std::vector<size_t> ready_order_;
  int iteration_ = 0;
  // static_graph: the globally used parameters found in the first iteration.
  std::vector<bool> static_used_;
  int divide_factor_ = 0;
  // Join's zero buckets, made at the first ShadowBackward (and again after a
  // rebuild changed the buckets).
  std::vector<GradBucket> zero_buckets_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_DDP_REDUCER_H_
