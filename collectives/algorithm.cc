#include "collectives/algorithm.h"

#include "core/kernels.h"
#include "core/status.h"

namespace lockstep {

absl::Status FinishAverage(ReduceOp op, const Tensor& t, int world_size) {
  if (op != ReduceOp::kAvg || world_size == 1 || t.numel() == 0) return absl::OkStatus();
  return Divide(t, world_size);
}

absl::Status ReduceRange(ReduceOp op, const Tensor& src, int64_t src_offset, const Tensor& dst,
                         int64_t dst_offset, int64_t count) {
  if (count == 0) return absl::OkStatus();
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor s, src.Flat(src_offset, count));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor d, dst.Flat(dst_offset, count));
  return ReduceInto(StepOp(op), s, d);
}

}  // namespace lockstep
