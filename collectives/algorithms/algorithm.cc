#include "collectives/algorithms/algorithm.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/kernels.h"
#include "core/status.h"

namespace lockstep {

absl::StatusOr<Tensor> Scratch::Get(int slot, int64_t count, DType dtype) {
  if (slot < 0) return absl::InvalidArgumentError("Scratch: negative slot");
  if (bytes_.size() <= static_cast<size_t>(slot)) bytes_.resize(slot + 1);
  const int64_t need = count * static_cast<int64_t>(DTypeSize(dtype));
  if (!bytes_[slot].defined() || bytes_[slot].numel() < need) {
    LOCKSTEP_ASSIGN_OR_RETURN(bytes_[slot],
                              Tensor::Empty({std::max<int64_t>(need, 64)}, DType::kU8, Device::Cpu(), pinned_));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor region, bytes_[slot].Flat(0, need));
  return region.ViewAs(dtype);
}

absl::Status ValidateAlgorithmOptions(const AlgorithmOptions& options) {
  constexpr size_t kMaxSegment = size_t{1} << 30;
  if (options.segment_bytes == 0 || options.segment_bytes > kMaxSegment) {
    return absl::InvalidArgumentError(absl::StrCat("AlgorithmOptions.segment_bytes is ", options.segment_bytes,
                                                   "; it must be in [1, 2^30] (default 256 KiB)"));
  }
  return absl::OkStatus();
}

std::vector<Chunk> BlocksOf(absl::Span<const int64_t> counts) {
  std::vector<Chunk> blocks;
  blocks.reserve(counts.size());
  int64_t offset = 0;
  for (int64_t count : counts) {
    blocks.push_back(Chunk{offset, count});
    offset += count;
  }
  return blocks;
}

int64_t TotalOf(absl::Span<const Chunk> blocks) {
  int64_t total = 0;
  for (const Chunk& b : blocks) total += b.count;
  return total;
}

absl::Status FinishAverage(ReduceOp op, const Tensor& t, int world_size) {
  if (op != ReduceOp::kAvg || world_size == 1 || t.numel() == 0) return absl::OkStatus();
  return Divide(t, world_size);
}

absl::Status ReduceRange(ReduceOp op, const Tensor& src, int64_t src_offset, const Tensor& dst, int64_t dst_offset,
                         int64_t count) {
  if (count == 0) return absl::OkStatus();
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor s, src.Flat(src_offset, count));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor d, dst.Flat(dst_offset, count));
  return ReduceInto(StepOp(op), s, d);
}

}  // namespace lockstep
