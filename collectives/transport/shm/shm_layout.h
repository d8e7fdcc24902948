// The shared segment's layout and the constants both ends of a ShmTransport
// pair agree on. Internal to collectives/transport/shm: the set-up
// (shm_setup.cc), the copy paths (shm_copy_paths.cc) and the transport
// (shm_transport.cc) share it.
//
// A rank's segment: its Control block (kControlBytes), then one Ring per
// sender, each RingStride(ring_bytes) apart: four index lines, then the
// ring's bytes.
#ifndef LOCKSTEP_COLLECTIVES_TRANSPORT_SHM_SHM_LAYOUT_H_
#define LOCKSTEP_COLLECTIVES_TRANSPORT_SHM_SHM_LAYOUT_H_

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "collectives/transport/message_header.h"
#include "collectives/transport/shm/shm_transport.h"

namespace lockstep {
namespace shm_internal {

constexpr uint32_t kHelloMagic = 0x4C4B5348;    // "LKSH"
constexpr uint32_t kSegmentMagic = 0x4C4B5347;  // "LKSG"
// A single-copy descriptor: the payload stays in the sender's memory.
constexpr uint32_t kSingleCopyMagic = 0x4C4B5343;  // "LKSC"
constexpr uint32_t kVersion = 3;                   // 3: authenticated hello (challenge-response)
constexpr size_t kLine = 64;
constexpr size_t kMaxAbortReason = 4000;
constexpr size_t kControlBytes = 8192;
constexpr size_t kRingHeaderBytes = 4 * kLine;
// Single copy: a receive straight into its destination copies at most this
// much per process_vm_readv (then acknowledges it and reports segments)...
constexpr size_t kSingleCopyPiece = 1 << 20;
// ...and one with `consume` this much, into a staging buffer that stays in
// the L2 cache while the consumer reduces from it.
constexpr size_t kSingleCopyStage = 256 << 10;

static_assert(sizeof(MessageHeader) == kLine, "headers fill one cache line, so they never wrap");

inline size_t RoundUp(size_t x, size_t to) { return (x + to - 1) / to * to; }
inline size_t RingStride(size_t ring_bytes) { return RoundUp(kRingHeaderBytes + ring_bytes, 4096); }
inline size_t SegmentBytes(size_t ring_bytes, int size) {
  return kControlBytes + RingStride(ring_bytes) * static_cast<size_t>(size);
}

// Unavailable: "<what>: <strerror(errno)>".
inline absl::Status Errno(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace shm_internal

// At the start of every rank's segment; written by its owner only.
struct ShmTransport::Control {
  uint32_t magic;
  uint32_t version;
  int32_t rank;
  int32_t size;
  uint64_t ring_bytes;
  // Where the owner's probe word lies in its address space, and its value:
  // a peer that reads it with process_vm_readv may use single copy.
  uint64_t probe_address;
  uint64_t probe_value;
  // The owner sleeps on its doorbell: writers ring it (Dekker-style, with a
  // fence between their index store and this load).
  alignas(shm_internal::kLine) std::atomic<uint32_t> sleeping;
  // Set (release) once `reason` is written.
  alignas(shm_internal::kLine) std::atomic<uint32_t> aborted;
  uint32_t reason_bytes;
  char reason[shm_internal::kMaxAbortReason];

  // The abort reason (valid once `aborted` was read as set).
  std::string Reason() const {
    return std::string(reason,
                       reason_bytes < shm_internal::kMaxAbortReason ? reason_bytes : shm_internal::kMaxAbortReason);
  }
};
static_assert(sizeof(ShmTransport::Control) <= shm_internal::kControlBytes, "layout");

// One directed pair's ring, in the receiver's segment; the data follows.
struct ShmTransport::Ring {
  alignas(shm_internal::kLine) std::atomic<uint64_t> head;  // Bytes written (sender).
  alignas(shm_internal::kLine) std::atomic<uint64_t> tail;  // Bytes consumed (receiver).
  // Single copy: payload bytes the sender exposed, and those the receiver
  // copied, over every single-copy message of this pair so far.
  alignas(shm_internal::kLine) std::atomic<uint64_t> exposed;  // Sender.
  alignas(shm_internal::kLine) std::atomic<uint64_t> acked;    // Receiver.
  char* data() { return reinterpret_cast<char*>(this) + shm_internal::kRingHeaderBytes; }
};
static_assert(sizeof(ShmTransport::Ring) == shm_internal::kRingHeaderBytes, "layout");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared between processes");

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_TRANSPORT_SHM_SHM_LAYOUT_H_
