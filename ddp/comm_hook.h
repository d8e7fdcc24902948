// Communication hooks for DistributedDataParallel, as PyTorch's
// register_comm_hook: a hook decides how one gradient bucket is reduced
// across ranks and returns a Work that completes when the bucket's buffer
// holds the result (the average over ranks).
//
//   LOCKSTEP_RETURN_IF_ERROR(ddp->RegisterCommHook(MakeFp16CompressHook()));   // half the traffic
//
// Semantics of the built-in hooks (torch 1.13's default_hooks.py):
//   * allreduce (the default without a hook): the reducer has already
//     divided each gradient by the world size as it copied it into the
//     bucket; the bucket is all-reduced with SUM.
//   * fp16_compress / bf16_compress: with a hook the reducer does NOT divide;
//     the hook casts the bucket to f16/bf16, divides by the world size in
//     that dtype, all-reduces (SUM) the compressed tensor, and casts the
//     result back into the bucket.
#ifndef LOCKSTEP_DDP_COMM_HOOK_H_
#define LOCKSTEP_DDP_COMM_HOOK_H_

#include <memory>
#include <string>

#include "collectives/communicator.h"
#include "collectives/work.h"
#include "ddp/grad_bucket.h"

namespace lockstep {

class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual std::string name() const = 0;
  // Starts reducing `bucket` (its buffer holds this rank's gradients, not
  // divided by the world size) and returns a Work that completes once the
  // buffer holds the average over ranks. Runs on the thread that finished
  // the bucket (backward's); must not block.
  virtual std::shared_ptr<Work> Run(Communicator& comm, GradBucket& bucket) = 0;
};

// PyTorch's allreduce_hook: divide by the world size, all-reduce SUM.
std::unique_ptr<CommHook> MakeAllReduceHook();
// PyTorch's fp16_compress_hook and bf16_compress_hook.
std::unique_ptr<CommHook> MakeFp16CompressHook();
std::unique_ptr<CommHook> MakeBf16CompressHook();

// "allreduce", "fp16_compress" or "bf16_compress" (the trainers' --comm_hook);
// "" or "none": no hook (nullptr). Anything else is an error listing them.
absl::StatusOr<std::unique_ptr<CommHook>> MakeCommHook(const std::string& name);

}  // namespace lockstep

#endif  // LOCKSTEP_DDP_COMM_HOOK_H_
