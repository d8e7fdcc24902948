// send_recv: rank 0 sends its buffer of `bytes` to rank 1, the other ranks
// idle: one direction's stream, the transport's raw throughput; count =
// bytes / element; busbw 1. Needs 2 ranks or more.
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tools/bench/ops/registry.h"

namespace lockstep {
namespace bench {
namespace {

absl::Status ValidateSendRecv(DType dtype, int n) {
  if (n < 2) return absl::InvalidArgumentError(absl::StrCat("--op=send_recv needs at least 2 ranks, not ", n));
  return absl::OkStatus();
}

std::shared_ptr<Work> LaunchSendRecv(Communicator& comm, const Buffers& b, const OpArgs& args) {
  if (comm.rank() == 0) return comm.Send(b.input, 1);
  if (comm.rank() == 1) return comm.Recv(b.output, 0);
  return nullptr;  // The other ranks idle.
}

int64_t CheckSendRecv(const CheckInput& in) {
  if (in.rank != 1) return 0;
  return CountWrongIn(in.host.output, 0, in.count, [&](int64_t i) { return InputValue(0, i); });
}

}  // namespace

CollectiveDescriptor SendRecvCollective() {
  CollectiveDescriptor d;
  d.name = "send_recv";
  d.count = WholeBufferCount;
  d.bytes = WholeBufferBytes;
  d.shape = SameShape;
  d.bus_factor = UnitBusFactor;
  d.validate = ValidateSendRecv;
  d.fill = FillInput;
  d.launch = LaunchSendRecv;
  d.count_wrong = CheckSendRecv;
  return d;
}

}  // namespace bench
}  // namespace lockstep
