#include "collectives/algorithms/barrier.h"

#include "core/status.h"

namespace lockstep {

absl::Status DisseminationBarrier(AlgorithmContext& ctx) {
  const int n = ctx.size(), r = ctx.rank();
  for (int step = 1; step < n; step <<= 1) {
    Transfer transfers[2] = {Transfer::Send((r + step) % n, nullptr, 0),
                             Transfer::Recv((r - step + n) % n, nullptr, 0)};
    LOCKSTEP_RETURN_IF_ERROR(ctx.transport.Exchange(transfers, ctx.NextTag(), ctx.deadline));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
