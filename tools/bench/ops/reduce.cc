// reduce: every rank's buffer of `bytes` reduced by --reduce_op into the
// root's output; count = bytes / element; busbw 1.
#include "tools/bench/ops/registry.h"

namespace lockstep {
namespace bench {
namespace {

std::shared_ptr<Work> LaunchReduce(Communicator& comm, const Buffers& b, const OpArgs& args) {
  return comm.Reduce(b.input, b.output, args.reduce_op, args.root);
}

// Only the root's output holds a result.
int64_t CheckReduce(const CheckInput& in) {
  if (in.rank != in.args.root) return 0;
  return CountWrongIn(in.host.output, 0, in.count, ReducedValues(in.args.reduce_op, in.n));
}

}  // namespace

CollectiveDescriptor ReduceCollective() {
  CollectiveDescriptor d;
  d.name = "reduce";
  d.count = WholeBufferCount;
  d.bytes = WholeBufferBytes;
  d.shape = SameShape;
  d.bus_factor = UnitBusFactor;
  d.fill = FillInput;
  d.launch = LaunchReduce;
  d.count_wrong = CheckReduce;
  return d;
}

}  // namespace bench
}  // namespace lockstep
