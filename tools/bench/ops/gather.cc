// gather: every rank's block of count = bytes / (n x element) elements into
// the root's output of `bytes`, in rank order; busbw (n-1)/n.
#include "tools/bench/ops/registry.h"

namespace lockstep {
namespace bench {
namespace {

std::shared_ptr<Work> LaunchGather(Communicator& comm, const Buffers& b, const OpArgs& args) {
  return comm.Gather(b.input, b.output, args.root);
}

// Only the root's output holds a result: block k is rank k's input.
int64_t CheckGather(const CheckInput& in) {
  if (in.rank != in.args.root) return 0;
  int64_t wrong = 0;
  for (int k = 0; k < in.n; ++k) {
    wrong += CountWrongIn(in.host.output, k * in.count, in.count, [&](int64_t i) { return InputValue(k, i); });
  }
  return wrong;
}

}  // namespace

CollectiveDescriptor GatherCollective() {
  CollectiveDescriptor d;
  d.name = "gather";
  d.count = PerRankCount;
  d.bytes = PerRankBytes;
  d.shape = WideOutputShape;
  d.bus_factor = ShareBusFactor;
  d.fill = FillInput;
  d.launch = LaunchGather;
  d.count_wrong = CheckGather;
  return d;
}

}  // namespace bench
}  // namespace lockstep
