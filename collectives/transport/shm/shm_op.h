// ShmTransport::Op: one Exchange or ExchangeOpen of a ShmTransport, from its
// first transfer to its last. Internal to collectives/transport/shm.
//
// Run() goes round the streams (one per peer and direction), moving at most
// one slot of each stream's current transfer per round (Step: the copy
// paths, shm_copy_paths.cc). When nothing moved it checks that the peers it
// waits for are alive, spins a while, then sleeps on the doorbell
// (shm_transport.cc).
#ifndef LOCKSTEP_COLLECTIVES_TRANSPORT_SHM_SHM_OP_H_
#define LOCKSTEP_COLLECTIVES_TRANSPORT_SHM_SHM_OP_H_

#include <poll.h>

#include <cstddef>
#include <cstdint>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collectives/transport/shm/shm_layout.h"
#include "collectives/transport/shm/shm_transport.h"
#include "collectives/transport/transfer_streams.h"
#include "collectives/transport/transport.h"
#include "core/deadline.h"

namespace lockstep {
namespace shm_internal {

// Progress of one transfer.
struct Progress {
  bool header_done = false;
  size_t done = 0;      // Bytes moved (single-copy sends: acknowledged by the receiver).
  size_t reported = 0;  // Bytes already passed to on_segment.
  // Single copy: the message is a descriptor; the pair's exposed/acked
  // counters stood at `base` before it; the payload is at `address` in the
  // sender; the sender exposed `exposed` bytes so far.
  bool single = false;
  uint64_t base = 0;
  uint64_t address = 0;
  size_t exposed = 0;
};

}  // namespace shm_internal

class ShmTransport::Op {
 public:
  Op(ShmTransport& transport, absl::Span<Transfer> initial, MessageTag tag, Deadline deadline, TransferFeed* feed);

  // Until every transfer (the feed's too) is done, or an error.
  absl::Status Run();

 private:
  using Progress = shm_internal::Progress;
  using Streams = TransferStreams<Progress>;
  static constexpr size_t kNone = Streams::kNone;

  // The copy paths (shm_copy_paths.cc). One step of `stream`'s current
  // transfer: at most one slot moved; *moved when anything did.
  absl::Status Step(size_t stream, bool* moved);
  // A descriptor in the ring, then the payload exposed as it becomes
  // ready; done when the receiver acknowledged every byte.
  void SendSingleCopy(Transfer& t, Progress& p, const MessageTag& tag, bool* moved);
  // Header, then the payload a slot at a time into the ring.
  void SendThroughRing(Transfer& t, Progress& p, const MessageTag& tag, bool* moved);
  absl::Status Receive(Transfer& t, Progress& p, const MessageTag& tag, bool* moved);
  // The message header at the ring's tail: checked against what `t`
  // expects, or routed; a single-copy descriptor switches `p` to it.
  absl::Status ReceiveHeader(Transfer& t, Progress& p, const MessageTag& tag, const MessageHeader& header);
  // What the sender exposed, read straight from its memory a piece at a
  // time, and acknowledged.
  absl::Status ReceiveSingleCopy(Transfer& t, Progress& p, const MessageTag& tag, bool* moved);
  // Whether `stream`'s transfer could move now (reads indices only).
  bool CouldMove(size_t stream);
  // Whether any pending stream's could.
  bool AnyCouldMove();
  // Spin: pauses between two full rounds, each followed by a look at the
  // indices (AnyCouldMove).
  static constexpr int kWatchPauses = 16;

  // Waiting (shm_transport.cc).
  MessageTag TagOf(const Transfer& t) const;
  // The op's number for errors.
  uint64_t Seq();
  bool SendsSingleCopy(const Transfer& t) const;
  // Tells `peer` (if it sleeps) that an index it may wait on moved: a few
  // rounds later (FlushNotifies), not at once. Telling takes a full fence
  // (our index store before the load of the peer's flag), which waits for
  // every store before it to reach the cache: right after a message was
  // copied into the ring, that is the message's cache-line transfers,
  // while this rank could already be reducing the peer's message or
  // watching for it. A peer only sleeps after spin_microseconds without
  // progress, so a few rounds' delay costs a sleeper nothing it notices;
  // the index itself is visible as soon as the stores drain.
  void Notify(int peer);
  // Rings the doorbell of every peer told since the last flush that sleeps.
  void FlushNotifies();
  // Rounds (moving, or idle) before the told peers are checked.
  static constexpr uint32_t kRoundsUntold = 8;
  // Run's loop (Run flushes the notifications on every way out).
  absl::Status RunRounds();
  // Whether `peer`'s socket hung up (it died or aborted); polls it.
  bool PeerHungUp(int peer);
  // Unavailable when a peer of a pending stream aborted or hung up, or this
  // rank was aborted.
  absl::Status CheckAlive();
  // Nothing moved: spins (pause, then yield) while the spin time lasts.
  // False once it is over.
  bool Spin();
  // Announces the sleep, looks once more, then polls the doorbell, the
  // peers' sockets and the feed's wake fd until one fires or the deadline.
  absl::Status Sleep();

  ShmTransport& tr_;
  Streams streams_;
  const MessageTag tag_;
  const Deadline deadline_;
  TransferFeed* const feed_;
  const uint64_t capacity_;  // Bytes per ring.
  const size_t slot_;
  Control* const me_;  // This rank's control block (null in a group of one).
  // Spinning.
  uint32_t idle_rounds_ = 0;
  Deadline spin_start_, now_;
  // Peers told since the last flush (Notify), each once, and the moving
  // rounds since.
  absl::InlinedVector<int, 4> notify_;
  uint32_t rounds_untold_ = 0;
  // Sleeping: the fds polled and the peer of each socket among them.
  absl::InlinedVector<pollfd, 16> fds_;
  absl::InlinedVector<int, 16> fd_peer_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_TRANSPORT_SHM_SHM_OP_H_
