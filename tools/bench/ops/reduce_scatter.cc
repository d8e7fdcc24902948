// reduce_scatter: every rank's input of `bytes` (n blocks of count = bytes /
// (n x element)) reduced by --reduce_op, rank r keeping block r; busbw (n-1)/n.
#include "tools/bench/ops/registry.h"

namespace lockstep {
namespace bench {
namespace {

std::shared_ptr<Work> LaunchReduceScatter(Communicator& comm, const Buffers& b, const OpArgs& args) {
  return comm.ReduceScatter(b.input, b.output, args.reduce_op);
}

int64_t CheckReduceScatter(const CheckInput& in) {
  const ReducedValues reduced(in.args.reduce_op, in.n);
  return CountWrongIn(in.host.output, 0, in.count, [&](int64_t i) { return reduced(in.rank * in.count + i); });
}

}  // namespace

CollectiveDescriptor ReduceScatterCollective() {
  CollectiveDescriptor d;
  d.name = "reduce_scatter";
  d.count = PerRankCount;
  d.bytes = PerRankBytes;
  d.shape = WideInputShape;
  d.bus_factor = ShareBusFactor;
  d.fill = FillInput;
  d.launch = LaunchReduceScatter;
  d.count_wrong = CheckReduceScatter;
  return d;
}

}  // namespace bench
}  // namespace lockstep
