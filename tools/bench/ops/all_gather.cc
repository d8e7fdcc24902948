// all_gather: every rank's block of count = bytes / (n x element) elements
// gathered, in rank order, into every rank's output of `bytes`; busbw (n-1)/n.
#include "tools/bench/ops/registry.h"

namespace lockstep {
namespace bench {
namespace {

std::shared_ptr<Work> LaunchAllGather(Communicator& comm, const Buffers& b, const OpArgs& args) {
  return comm.AllGather(b.input, b.output);
}

// Block k of the output is rank k's input.
int64_t CheckAllGather(const CheckInput& in) {
  int64_t wrong = 0;
  for (int k = 0; k < in.n; ++k) {
    wrong += CountWrongIn(in.host.output, k * in.count, in.count, [&](int64_t i) { return InputValue(k, i); });
  }
  return wrong;
}

}  // namespace

CollectiveDescriptor AllGatherCollective() {
  CollectiveDescriptor d;
  d.name = "all_gather";
  d.count = PerRankCount;
  d.bytes = PerRankBytes;
  d.shape = WideOutputShape;
  d.bus_factor = ShareBusFactor;
  d.fill = FillInput;
  d.launch = LaunchAllGather;
  d.count_wrong = CheckAllGather;
  return d;
}

}  // namespace bench
}  // namespace lockstep
