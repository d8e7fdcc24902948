// broadcast: the root's buffer of `bytes` into every rank's (in place);
// count = bytes / element; busbw 1.
#include "tools/bench/ops/registry.h"

namespace lockstep {
namespace bench {
namespace {

std::shared_ptr<Work> LaunchBroadcast(Communicator& comm, const Buffers& b, const OpArgs& args) {
  return comm.Broadcast(b.input, args.root);
}

int64_t CheckBroadcast(const CheckInput& in) {
  return CountWrongIn(in.host.input, 0, in.count, [&](int64_t i) { return InputValue(in.args.root, i); });
}

}  // namespace

CollectiveDescriptor BroadcastCollective() {
  CollectiveDescriptor d;
  d.name = "broadcast";
  d.count = WholeBufferCount;
  d.bytes = WholeBufferBytes;
  d.shape = SameShape;
  d.bus_factor = UnitBusFactor;
  d.fill = FillInput;
  d.launch = LaunchBroadcast;
  d.count_wrong = CheckBroadcast;
  return d;
}

}  // namespace bench
}  // namespace lockstep
