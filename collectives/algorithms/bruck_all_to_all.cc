#include "collectives/algorithms/bruck_all_to_all.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace lockstep {

absl::Status BruckAllToAll(AlgorithmContext& ctx, const Tensor& input, const Tensor& output, int64_t block) {
  const int n = ctx.size(), r = ctx.rank();
  if (block < 0 || input.numel() != n * block || output.numel() != n * block) {
    return absl::InvalidArgumentError(absl::StrCat("BruckAllToAll: input and output need ", n, " blocks of ", block,
                                                   " elements; they have ", input.numel(), " and ", output.numel()));
  }
  if (block == 0) return absl::OkStatus();
  const size_t bytes = static_cast<size_t>(block) * input.element_size();
  if (n == 1) return output.CopyFrom(input);
  // rotated slot i: the block for rank r + i (later: the one from r − i).
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor rotated, ctx.ScratchTensor(0, n * block, input.dtype()));
  for (int i = 0; i < n; ++i) {
    std::memcpy(BytePtr(rotated, i * block), BytePtr(input, ((r + i) % n) * block), bytes);
  }
  // The slots of one step travel packed in one message each way.
  const int64_t most = (n + 1) / 2;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor packed, ctx.ScratchTensor(1, 2 * most * block, input.dtype()));
  char* const out_buf = static_cast<char*>(packed.raw_data());
  char* const in_buf = out_buf + most * bytes;
  for (int step = 1; step < n; step <<= 1) {
    size_t m = 0;
    for (int i = step; i < n; ++i) {
      if ((i & step) != 0) std::memcpy(out_buf + bytes * m++, BytePtr(rotated, i * block), bytes);
    }
    Transfer transfers[2] = {Transfer::Send((r + step) % n, out_buf, m * bytes),
                             Transfer::Recv((r - step + n) % n, in_buf, m * bytes)};
    LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange(transfers, ctx.NextTag(), ctx.deadline));
    m = 0;
    for (int i = step; i < n; ++i) {
      if ((i & step) != 0) std::memcpy(BytePtr(rotated, i * block), in_buf + bytes * m++, bytes);
    }
  }
  for (int j = 0; j < n; ++j) {
    std::memcpy(BytePtr(output, j * block), BytePtr(rotated, ((r - j + n) % n) * block), bytes);
  }
  return absl::OkStatus();
}

}  // namespace lockstep
