#include "collectives/algorithms/algorithm.h"

#include <algorithm>
#include <cmath>
#include <utility>

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

const char* AllReduceAlgorithmName(AllReduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllReduceAlgorithm::kAuto:
      return "auto";
    case AllReduceAlgorithm::kRing:
      return "ring";
    case AllReduceAlgorithm::kRecursiveDoubling:
      return "recursive_doubling";
    case AllReduceAlgorithm::kRabenseifner:
      return "rabenseifner";
    case AllReduceAlgorithm::kTree:
      return "tree";
  }
  return "unknown";
}

absl::StatusOr<AllReduceAlgorithm> ParseAllReduceAlgorithm(absl::string_view name) {
  for (AllReduceAlgorithm a :
       {AllReduceAlgorithm::kAuto, AllReduceAlgorithm::kRing, AllReduceAlgorithm::kRecursiveDoubling,
        AllReduceAlgorithm::kRabenseifner, AllReduceAlgorithm::kTree}) {
    if (name == AllReduceAlgorithmName(a)) return a;
  }
  return absl::InvalidArgumentError(absl::StrCat("all-reduce algorithm '", name,
                                                 "' is not one of auto, ring, recursive_doubling, rabenseifner, tree"));
}

LinkConstants LinkConstantsFor(absl::string_view transport_name) {
  if (transport_name == "shm") return LinkConstants{1.0, 1.0 / 8000, 1.0 / 10000, 0.5};
  return LinkConstants();
}

absl::Status ValidateAlgorithmOptions(const AlgorithmOptions& options) {
  if (options.link.has_value()) {
    const LinkConstants& l = *options.link;
    for (auto [name, value] : {std::pair<const char*, double>{"latency_us", l.latency_us},
                               {"us_per_byte", l.us_per_byte},
                               {"reduce_us_per_byte", l.reduce_us_per_byte},
                               {"message_us", l.message_us}}) {
      if (!(value >= 0) || !std::isfinite(value)) {
        return absl::InvalidArgumentError(absl::StrCat("AlgorithmOptions.link.", name, " is ", value,
                                                       "; it must be finite and >= 0 (or leave link unset)"));
      }
    }
  }
  if (options.cores_per_host < 0) {
    return absl::InvalidArgumentError(absl::StrCat("AlgorithmOptions.cores_per_host is ", options.cores_per_host,
                                                   "; it must be >= 0 (0: this machine's)"));
  }
  if (!(options.ranks_per_core >= 1) || !std::isfinite(options.ranks_per_core)) {
    return absl::InvalidArgumentError(
        absl::StrCat("AlgorithmOptions.ranks_per_core is ", options.ranks_per_core, "; it must be finite and >= 1"));
  }
  if (options.ranks_per_host < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("AlgorithmOptions.ranks_per_host is ", options.ranks_per_host, "; it must be >= 1"));
  }
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

absl::Status ReduceOrdered(ReduceOp op, const Tensor& mine, const Tensor& theirs, bool mine_first) {
  if (mine_first) return ReduceInto(StepOp(op), theirs, mine);
  const Tensor inputs[] = {theirs, mine};
  return Reduce(StepOp(op), inputs, mine);
}

absl::Status FoldPairs(AlgorithmContext& ctx, const PowerOfTwoFold& fold, const Tensor& buffer, ReduceOp op) {
  const MessageTag tag = ctx.NextTag();
  if (!fold.paired()) return absl::OkStatus();
  if (fold.folded_away()) {
    Transfer t = Transfer::Send(fold.rank + 1, buffer.raw_data(), buffer.nbytes());
    return ctx.transport.Exchange({&t, 1}, tag, ctx.deadline);
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor theirs, ctx.ScratchTensor(0, buffer.numel(), buffer.dtype()));
  Transfer t = Transfer::Recv(fold.rank - 1, theirs.raw_data(), buffer.nbytes());
  LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange({&t, 1}, tag, ctx.deadline));
  return ReduceOrdered(op, buffer, theirs, /*mine_first=*/false);
}

absl::Status ReduceRange(ReduceOp op, const Tensor& src, int64_t src_offset, const Tensor& dst, int64_t dst_offset,
                         int64_t count) {
  if (count == 0) return absl::OkStatus();
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor s, src.Flat(src_offset, count));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor d, dst.Flat(dst_offset, count));
  return ReduceInto(StepOp(op), s, d);
}

}  // namespace lockstep
