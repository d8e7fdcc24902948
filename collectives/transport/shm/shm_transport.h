// ShmTransport: the ranks of one host exchange bytes through shared memory
// instead of the kernel's loopback TCP path.
//
//   ShmTransportOptions options;   // defaults suit two ranks on two cores
//   LOCKSTEP_ASSIGN_OR_RETURN(auto transport,
//       ShmTransport::Create(store, rank, world_size, options));
//
// Segments that cannot leak. Each rank creates one anonymous memory file
// (memfd_create, close-on-exec, sealed against resizing) holding its control
// block and one ring per sender, and an eventfd (its doorbell). It listens on
// a Unix-domain socket in the abstract namespace under a random name that it
// publishes in the store ("shm_transport/<rank>"); every pair of ranks keeps
// one connection, over which the two ranks pass each other their memfd and
// eventfd (SCM_RIGHTS). Nothing is ever named in /dev/shm or the file
// system: when the last process holding a mapping exits (however it exits,
// SIGKILL included) the kernel frees everything.
//
// Rings. Every directed pair (sender -> receiver) has one single-producer
// single-consumer byte ring of `slots` x `slot_bytes`, in the receiver's
// segment. A message is a 64-byte header (seq, tag, element, bytes) followed
// by its payload, padded to 64 bytes, so headers never wrap and payloads stay
// cache-line aligned. The receiver checks the header against what it expects
// exactly as TcpTransport does (a mismatch names both views). The sender
// publishes at most `slot_bytes` at a time, so a receiver (and a pipelined
// algorithm behind it, through on_segment and `ready`) starts on a slot
// while the next is being written. A receive with `Transfer::consume` gets
// the payload where it lies in the ring (ConsumesInPlace() is true), so
// reductions read straight out of shared memory instead of through a copy.
//
// Waiting. A rank that cannot progress spins for `spin_microseconds` on the
// rings' indices, then sleeps in poll() on its doorbell, its peers' sockets
// and the feed's wake fd, with the caller's deadline. A writer rings the
// reader's doorbell only when the reader said it sleeps. A peer that dies
// closes its socket (the kernel does it): poll() reports it and the error
// names the rank and its pid ("closed the connection / died during op #N").
// Abort(reason) writes the reason into this rank's control block, rings
// every peer and shuts the sockets, so peers fail at once with the reason.
//
// Single copy. A message of single_copy_bytes..single_copy_max_bytes does
// not go through the ring (two copies per byte: into it, out of it): the sender
// puts only a descriptor there (the header, plus where the payload lies in
// its memory) and exposes the payload's bytes as they become ready (all at
// once, or growing with `ready`); the receiver copies them straight from the
// sender's memory with process_vm_readv (cross-memory attach, as OpenMPI's
// vader does), into the destination or, for `consume`, piecewise through a
// small cache-resident staging buffer, and acknowledges each piece through a
// counter beside the ring. The send completes only when every byte is
// acknowledged, so the caller's buffer is never read after the Exchange
// returns successfully. (A failed Exchange may return while the peer still
// reads: Abort the transport before freeing the buffer, as the Communicator
// does; a receiver sees the hang-up after its last read and fails.) The
// waits are the same (spin, then the doorbell and the peers' sockets), so a
// peer that dies mid-message is reported by name.
// At set-up every rank tries to read a known word from each peer; where
// that fails (another pid namespace, ptrace restrictions: EPERM/ESRCH) that
// direction silently uses the ring. CopyPath() says which is in use.
#ifndef LOCKSTEP_COLLECTIVES_TRANSPORT_SHM_SHM_TRANSPORT_H_
#define LOCKSTEP_COLLECTIVES_TRANSPORT_SHM_SHM_TRANSPORT_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/store/store.h"
#include "collectives/transport/transport.h"
#include "core/deadline.h"
#include "core/fd.h"

namespace lockstep {

struct ShmTransportOptions {
  // Setting up: waiting for the other ranks in the store and connecting.
  Milliseconds timeout = kDefaultStoreTimeout;
  // How long one connection to this rank's socket may take to send its
  // hello; a slower one is dropped, and set-up goes on for the real ranks.
  Milliseconds handshake_timeout = Milliseconds(5000);
  // The group's secret (LOCKSTEP_STORE_TOKEN), as TcpTransportOptions'
  // secret: a connecting rank proves it knows it, with the same
  // challenge-response (collectives/transport/tcp/rank_handshake.h), so a
  // process of the same user that is not of the group is dropped. Empty:
  // only the user id is checked (SO_PEERCRED).
  std::string secret;
  // Bytes a sender publishes at a time into a ring (one slot): small enough
  // that a ring stays in the caches, large enough that the per-slot
  // handshake is cheap. A multiple of 64 in [4 KiB, 16 MiB].
  size_t slot_bytes = 64 << 10;
  // Slots per ring (per directed pair); the ring holds slots x slot_bytes.
  // [2, 1024], and slots x slot_bytes <= 1 GiB.
  int slots = 8;
  // How long a waiting rank polls the rings before it sleeps on its
  // doorbell: a peer usually answers sooner than a sleeping thread wakes.
  // [0, 1000000].
  int spin_microseconds = 200;
  // The first part of that spin only pauses the core (a peer on a core of
  // its own answers within about a microsecond); after it each round yields
  // the core. -1 (the default): 20 µs, or 0 when this host has fewer CPUs
  // than the group has ranks (a rank that pauses then keeps the one it
  // waits for off its core). [-1, 1000000].
  int pause_microseconds = -1;
  // Messages of at least this many bytes are copied with non-temporal
  // stores (into the ring by the sender, into the destination by the
  // receiver): the destination is not read first and the caches are left
  // alone. Off by default (SIZE_MAX): it did not help reliably where
  // measured (docs/perf_log/all_reduce_shm.md). >= 1.
  size_t streaming_send_bytes = SIZE_MAX;
  size_t streaming_receive_bytes = SIZE_MAX;
  // Messages of at least this many bytes are copied once, straight from the
  // sender's memory (process_vm_readv), where the peers allow it; 0: never
  // (every message goes through the ring). 0 or >= 64. Below the default
  // the kernel's pinning of the sender's pages costs more than the ring's
  // second, cache-resident copy (the crossover is measured in
  // docs/perf_log/all_reduce_shm.md).
  size_t single_copy_bytes = 2 << 20;
  // ...and at most this many (larger ones go through the ring again). The
  // default suits buffers on transparent huge pages, as lockstep's tensors
  // are (core/storage.h); a caller whose large buffers are on 4 KiB pages,
  // where the kernel pins every page, may want 16 MiB here.
  // >= single_copy_bytes.
  size_t single_copy_max_bytes = size_t{1} << 30;
};

// InvalidArgument naming the bad field and the accepted range.
absl::Status ValidateShmTransportOptions(const ShmTransportOptions& options);

class ShmTransport : public Transport {
 public:
  // Every rank of the group must be on this host (the same host identity,
  // the same network namespace: abstract sockets are per namespace); the
  // group meets through `store` (keys under "shm_transport/").
  static absl::StatusOr<std::unique_ptr<ShmTransport>> Create(Store& store, int rank, int size,
                                                              const ShmTransportOptions& options);
  ~ShmTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // "rank 2 (shm, pid 1234)".
  std::string PeerName(int peer) const override;
  absl::Status Exchange(absl::Span<Transfer> transfers, MessageTag tag, Deadline deadline) override;
  absl::Status ExchangeOpen(TransferFeed& feed, Deadline deadline) override;
  TrafficCounters Traffic() const override;
  void Abort(absl::string_view reason) override;
  // Receives hand `Transfer::consume` the payload in the shared ring.
  bool ConsumesInPlace() const override { return true; }

  // Whether messages of at least single_copy_bytes to `peer` are copied once
  // (process_vm_readv by the peer) rather than through the ring: the option
  // is on on both ranks and the peer could read this rank's memory at set-up.
  bool SingleCopyTo(int peer) const;
  // "single-copy (process_vm_readv) for messages of 2097152..16777216 bytes
  // to every peer", "ring only (single copy off)", or which peers use which
  // path (and why not single copy).
  std::string CopyPath() const;
  // Payload bytes received through single copy so far (any thread).
  uint64_t SingleCopyBytesReceived() const { return single_copy_received_.load(std::memory_order_relaxed); }

  // Internal layout, public for the implementation's helpers only.
  struct Control;
  struct Ring;

 private:
  ShmTransport(int rank, int size, const ShmTransportOptions& options);

  // Exchange and ExchangeOpen: the initial transfers, then the feed's.
  absl::Status Run(absl::Span<Transfer> initial, MessageTag tag, Deadline deadline, TransferFeed* feed);
  // Why `peer` cannot go on (it aborted with a reason, or died), during op `seq`.
  absl::Status PeerGoneError(int peer, uint64_t seq) const;
  // The ring `from` -> `to` (in `to`'s segment).
  Ring* RingOf(int from, int to) const;
  Control* ControlOf(int rank) const;
  void RingDoorbell(int peer) const;

  // Create's steps (shm_setup.cc).
  class Setup;
  // One Exchange or ExchangeOpen (shm_op.h).
  class Op;

  struct Mapping {
    void* address = nullptr;
    size_t bytes = 0;
  };
  struct Peer {
    Fd socket;    // connected Unix socket: its hang-up means the peer is gone
    Fd doorbell;  // the peer's eventfd
    pid_t pid = 0;
    bool gone = false;  // its socket hung up
  };

  const int rank_;
  const int size_;
  const ShmTransportOptions options_;
  const std::chrono::microseconds pause_;  // options_.pause_microseconds, resolved
  const size_t ring_bytes_;                // slots x slot_bytes
  Fd doorbell_;                            // this rank's eventfd
  std::vector<Mapping> segments_;          // [rank]: every rank's segment, mapped here
  std::vector<Peer> peers_;
  // [peer]: the tail of our ring into the peer, as last read (Run only).
  std::vector<uint64_t> tail_seen_;
  std::atomic<bool> aborted_{false};
  // [peer]: messages of >= single_copy_bytes to it are copied once.
  std::vector<char> single_copy_to_;
  // Why single copy is off towards each peer that cannot use it (for CopyPath).
  std::vector<std::string> single_copy_refused_;
  // A word that the peers read at set-up to learn whether process_vm_readv
  // works between us (its address and value are in our control block).
  uint64_t probe_word_ = 0;
  // Receives with `consume` on the single-copy path read through this.
  std::unique_ptr<char[]> staging_;
  std::atomic<uint64_t> single_copy_received_{0};
  TrafficTally traffic_;  // Payload bytes per peer.
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_TRANSPORT_SHM_SHM_TRANSPORT_H_
