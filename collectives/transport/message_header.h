// The header in front of every message a transport carries, TCP's and
// shared memory's alike: 64 bytes, one cache line, so that the payload after
// it keeps the user buffer's alignment modulo 64 (the kernel's socket copies
// run at full speed) and a header never wraps around a shared-memory ring.
// A receiver checks it against the message it expects before it touches the
// payload: a peer that issued another collective is an error naming both
// views, never a silent mix of bytes.
#ifndef LOCKSTEP_COLLECTIVES_TRANSPORT_MESSAGE_HEADER_H_
#define LOCKSTEP_COLLECTIVES_TRANSPORT_MESSAGE_HEADER_H_

#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "collectives/transport/transport.h"

namespace lockstep {

inline constexpr uint32_t kMessageMagic = 0x4C4B4D53;  // "LKMS"

struct MessageHeader {
  uint64_t seq;
  uint32_t tag;
  uint32_t magic;
  uint64_t bytes;
  uint64_t element;  // MessageTag::element.
  // Shared memory's single copy only (another magic): where the payload
  // lies in the sender's address space, and the pair's `exposed` counter
  // before it. Zero otherwise.
  uint64_t address;
  uint64_t base;
  uint64_t reserved[2];
};
static_assert(sizeof(MessageHeader) == 64, "the wire layout: one cache line");

// The header of a message with `tag` and `bytes` of payload.
inline MessageHeader MakeMessageHeader(const MessageTag& tag, uint64_t bytes, uint32_t magic = kMessageMagic) {
  return MessageHeader{tag.seq, tag.tag, magic, bytes, tag.element, 0, 0, {}};
}

// The mismatch error of CheckMessageHeader (`got` differs from what was
// expected).
absl::Status MessageHeaderError(const MessageHeader& got, const MessageTag& expected, uint64_t expected_bytes,
                                const std::string& peer_name, int rank);

// OK if `got` announces the message expected: magic, sequence number, tag,
// size, and the element type where both sides give one. Otherwise the error
// every transport reports for it, naming `peer_name()`'s view and `rank`'s.
// The name is formatted only for that error: a receive that matches (every
// one, in a correct program) allocates nothing here.
inline absl::Status CheckMessageHeader(const MessageHeader& got, const MessageTag& expected, uint64_t expected_bytes,
                                       absl::FunctionRef<std::string()> peer_name, int rank) {
  if (got.magic == kMessageMagic && got.seq == expected.seq && got.tag == expected.tag && got.bytes == expected_bytes &&
      (got.element == 0 || expected.element == 0 || got.element == expected.element)) {
    return absl::OkStatus();
  }
  return MessageHeaderError(got, expected, expected_bytes, peer_name(), rank);
}

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_TRANSPORT_MESSAGE_HEADER_H_
