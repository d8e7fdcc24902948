#include "collectives/internal/fingerprint.h"

#include "absl/strings/str_cat.h"
#include "core/reduce_op.h"

namespace lockstep {
namespace communicator_internal {
namespace {

// Indexed by OpType's value.
constexpr const char* kOpTypeNames[kOpTypes] = {
    "?",
    "AllReduce",
    "Reduce",
    "Broadcast",
    "AllGather",
    "Gather",
    "Scatter",
    "ReduceScatter",
    "Barrier",
    "Send",
    "Recv",
    "AllGatherV",
    "ReduceScatterV",
    "GatherV",
    "ScatterV",
    "AllToAll",
    "AllToAllV",
    "AllReduceCoalesced",
    "BroadcastCoalesced",
    "RecvAnySource",
    "Split",
};

}  // namespace

const char* OpTypeName(uint8_t op) { return op < kOpTypes ? kOpTypeNames[op] : "?"; }

bool Fingerprint::reduces() const {
  return is(OpType::kAllReduce) || is(OpType::kReduce) || is(OpType::kReduceScatter) || is(OpType::kReduceScatterV) ||
         is(OpType::kAllReduceCoalesced);
}

FlightRecord RecordOf(const Fingerprint& f) {
  FlightRecord r;
  r.seq = f.seq;
  r.op = OpTypeName(f.op);
  r.dtype = f.dtype;
  r.count = f.count;
  r.point_to_point = f.is(OpType::kSend) || f.is(OpType::kRecv) || f.is(OpType::kRecvAnySource);
  r.peer = f.is(OpType::kRecvAnySource) ? -2 : f.root;
  r.tag = f.tag;
  if (f.reduces()) r.reduce_op = f.reduce_op;
  return r;
}

std::string Describe(const Fingerprint& f) {
  std::string s = absl::StrCat(OpTypeName(f.op), " #", f.seq, " (");
  if (!f.is(OpType::kBarrier)) {
    absl::StrAppend(&s, DTypeName(static_cast<DType>(f.dtype)));
    if (!f.is(OpType::kAllToAllV)) absl::StrAppend(&s, ", count ", f.count);
  }
  if (f.reduces()) absl::StrAppend(&s, ", ", ReduceOpName(static_cast<ReduceOp>(f.reduce_op)));
  if (f.layout != 0) absl::StrAppend(&s, ", layout ", absl::Hex(f.layout, absl::kZeroPad8));
  if (f.is(OpType::kSend)) {
    absl::StrAppend(&s, ", to rank ", f.root, ", tag ", f.tag);
  } else if (f.is(OpType::kRecv)) {
    absl::StrAppend(&s, ", from rank ", f.root, ", tag ", f.tag);
  } else if (f.is(OpType::kRecvAnySource)) {
    absl::StrAppend(&s, ", from any rank, tag ", f.tag);
  } else if (f.root >= 0) {
    absl::StrAppend(&s, ", root ", f.root);
  }
  return s + ")";
}

}  // namespace communicator_internal
}  // namespace lockstep
