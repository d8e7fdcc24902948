// all_reduce: every rank's buffer of `bytes` reduced by --reduce_op, in
// place (as torch.distributed's); count = bytes / element; busbw 2(n-1)/n.
#include "core/status.h"
#include "tools/bench/ops/registry.h"

namespace lockstep {
namespace bench {
namespace {

// The input is filled and copied into the output, which is reduced in place.
absl::Status FillAllReduce(const Buffers& b, int rank) {
  LOCKSTEP_RETURN_IF_ERROR(FillInput(b, rank));
  return b.output.CopyFrom(b.input);
}

std::shared_ptr<Work> LaunchAllReduce(Communicator& comm, const Buffers& b, const OpArgs& args) {
  return comm.AllReduce(b.output, args.reduce_op);
}

int64_t CheckAllReduce(const CheckInput& in) {
  return CountWrongIn(in.host.output, 0, in.count, ReducedValues(in.args.reduce_op, in.n));
}

}  // namespace

CollectiveDescriptor AllReduceCollective() {
  CollectiveDescriptor d;
  d.name = "all_reduce";
  d.count = WholeBufferCount;
  d.bytes = WholeBufferBytes;
  d.shape = SameShape;
  d.bus_factor = AllReduceBusFactor;
  d.fill = FillAllReduce;
  d.launch = LaunchAllReduce;
  d.count_wrong = CheckAllReduce;
  return d;
}

}  // namespace bench
}  // namespace lockstep
