// Fingerprint: what identifies one operation of a communicator across ranks
// (kind, dtype, count, root or peer, tag, layout), its names in messages and
// its flight-recorder view. Internal to //collectives:communicator.
//
//   Fingerprint f{0, static_cast<uint8_t>(OpType::kAllReduce), static_cast<uint8_t>(DType::kF32),
//                 static_cast<uint8_t>(ReduceOp::kSum), 0, -1, 1024, 0, 0};
//   Describe(f);  // "AllReduce #0 (f32, count 1024, SUM)"
#ifndef LOCKSTEP_COLLECTIVES_INTERNAL_FINGERPRINT_H_
#define LOCKSTEP_COLLECTIVES_INTERNAL_FINGERPRINT_H_

#include <cstdint>
#include <string>

#include "collectives/flight_recorder.h"
#include "core/dtype.h"

namespace lockstep {
namespace communicator_internal {

// Values are wire format (LOCKSTEP_DEBUG=DETAIL compares them across ranks):
// append only.
enum class OpType : uint8_t {
  kAllReduce = 1,
  kReduce,
  kBroadcast,
  kAllGather,
  kGather,
  kScatter,
  kReduceScatter,
  kBarrier,
  kSend,
  kRecv,
  kAllGatherV,
  kReduceScatterV,
  kGatherV,
  kScatterV,
  kAllToAll,
  kAllToAllV,
  kAllReduceCoalesced,
  kBroadcastCoalesced,
  kRecvAnySource,
  kSplit,
};
// Above every OpType: the size of tables indexed by it.
constexpr int kOpTypes = static_cast<int>(OpType::kSplit) + 1;

// "AllReduce", ...; "?" for a value that is no OpType (a corrupt peer's).
const char* OpTypeName(uint8_t op);

// Compared bytewise across ranks: no padding, every field set.
struct Fingerprint {
  uint64_t seq;
  uint8_t op;
  uint8_t dtype;
  uint8_t reduce_op;
  uint8_t reserved;
  int32_t root;  // The root; for Send/Recv the peer.
  int64_t count;
  uint32_t tag;     // Send/Recv only.
  uint32_t layout;  // Uneven and coalesced ops: a hash of the blocks' sizes.

  bool is(OpType type) const { return op == static_cast<uint8_t>(type); }
  // A reduction: its reduce op is part of what every rank must agree on.
  bool reduces() const;
};
static_assert(sizeof(Fingerprint) == 32, "Fingerprint is compared bytewise: no padding");

// "AllReduce #12 (f32, count 1024, SUM)", for error messages.
std::string Describe(const Fingerprint& f);
// The flight recorder's view of an operation.
FlightRecord RecordOf(const Fingerprint& f);

}  // namespace communicator_internal
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_INTERNAL_FINGERPRINT_H_
