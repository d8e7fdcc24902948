// scatter: the root's input of `bytes` (n blocks of count = bytes / (n x
// element)), block r to rank r; busbw (n-1)/n.
#include "tools/bench/ops/registry.h"

namespace lockstep {
namespace bench {
namespace {

std::shared_ptr<Work> LaunchScatter(Communicator& comm, const Buffers& b, const OpArgs& args) {
  return comm.Scatter(b.input, b.output, args.root);
}

// The root's input holds its own known values throughout, so rank r
// receives the root's values r x count + i.
int64_t CheckScatter(const CheckInput& in) {
  return CountWrongIn(in.host.output, 0, in.count,
                      [&](int64_t i) { return InputValue(in.args.root, in.rank * in.count + i); });
}

}  // namespace

CollectiveDescriptor ScatterCollective() {
  CollectiveDescriptor d;
  d.name = "scatter";
  d.count = PerRankCount;
  d.bytes = PerRankBytes;
  d.shape = WideInputShape;
  d.bus_factor = ShareBusFactor;
  d.fill = FillInput;
  d.launch = LaunchScatter;
  d.count_wrong = CheckScatter;
  return d;
}

}  // namespace bench
}  // namespace lockstep
