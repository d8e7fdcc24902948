#include "collectives/transport/shm/shm_transport.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/transport/tcp/socket.h"
#include "collectives/transport/transfer_streams.h"
#include "collectives/transport/message_header.h"
#include "collectives/transport/transport_errors.h"
#include "core/status.h"

namespace lockstep {
namespace {

constexpr uint32_t kHelloMagic = 0x4C4B5348;    // "LKSH"
constexpr uint32_t kSegmentMagic = 0x4C4B5347;  // "LKSG"
// A single-copy descriptor: the payload stays in the sender's memory.
constexpr uint32_t kSingleCopyMagic = 0x4C4B5343;  // "LKSC"
constexpr uint32_t kVersion = 2;
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

// What two ranks tell each other on their connection, with their memfd and
// eventfd attached.
struct Hello {
  uint32_t magic;
  uint32_t version;
  int32_t rank;
  int32_t size;
  uint64_t ring_bytes;
};

std::string AddressKey(int rank) { return absl::StrCat("shm_transport/", rank); }
std::string ClaimKey(int rank) { return absl::StrCat("shm_transport/", rank, "/claims"); }

size_t RoundUp(size_t x, size_t to) { return (x + to - 1) / to * to; }

size_t RingStride(size_t ring_bytes) { return RoundUp(kRingHeaderBytes + ring_bytes, 4096); }
size_t SegmentBytes(size_t ring_bytes, int size) {
  return kControlBytes + RingStride(ring_bytes) * static_cast<size_t>(size);
}

absl::Status Errno(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// memcpy with non-temporal stores: the destination's lines go to memory
// without being read first (no read-for-ownership) and without evicting the
// caches' useful lines, and without pulling the lines over from the peer's
// cache when the ranks' cores do not share one. Used for large messages only
// (a small one is read by the peer at once, best from a cache).
void CopyStreaming(char* dst, const char* src, size_t n) {
#if defined(__SSE2__)
  // Head: up to the destination's 16-byte alignment.
  const size_t head = std::min(n, (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15);
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  std::memcpy(dst + i, src + i, n - i);
  // Streaming stores are weakly ordered: they must be visible before the
  // index that publishes them (a release store does not order them).
  _mm_sfence();
#else
  std::memcpy(dst, src, n);
#endif
}

void Copy(char* dst, const char* src, size_t n, bool streaming) {
  if (streaming) {
    CopyStreaming(dst, src, n);
  } else {
    std::memcpy(dst, src, n);
  }
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Sends `hello` with `fds` attached (SCM_RIGHTS) before the deadline.
absl::Status SendHello(int fd, const Hello& hello, const int (&fds)[2], Deadline deadline, const std::string& peer) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(fds))] = {};
  iovec iov{const_cast<Hello*>(&hello), sizeof(hello)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(fds));
  std::memcpy(CMSG_DATA(c), fds, sizeof(fds));
  while (true) {
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(sizeof(hello))) return absl::OkStatus();
    if (n >= 0) return absl::UnavailableError(absl::StrCat("ShmTransport: short hello to ", peer));
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return Errno(absl::StrCat("ShmTransport: sending the hello to ", peer));
    }
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, PollTimeoutMs(deadline)) == 0 && SteadyClock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("ShmTransport: timed out sending the hello to ", peer));
    }
  }
}

// Receives a Hello and the two descriptors sent with it.
absl::Status RecvHello(int fd, Hello* hello, Fd (&fds)[2], Deadline deadline, const std::string& peer) {
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
  size_t got = 0;
  while (got < sizeof(Hello)) {
    iovec iov{reinterpret_cast<char*>(hello) + got, sizeof(Hello) - got};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n > 0) {
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t k = 0; k < count; ++k) {
          int received;
          std::memcpy(&received, CMSG_DATA(c) + k * sizeof(int), sizeof(int));
          Fd owned(received);  // Closed unless kept below.
          if (k < 2 && !fds[k].valid()) fds[k] = std::move(owned);
        }
      }
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      return absl::UnavailableError(absl::StrCat("ShmTransport: ", peer, " closed the connection during set-up"));
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return Errno(absl::StrCat("ShmTransport: receiving the hello from ", peer));
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, PollTimeoutMs(deadline)) == 0 && SteadyClock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("ShmTransport: timed out waiting for the hello of ", peer));
    }
  }
  if (!fds[0].valid() || !fds[1].valid()) {
    return absl::FailedPreconditionError(absl::StrCat("ShmTransport: ", peer,
                                                      " sent no shared segment with its hello; is it a lockstep rank?"));
  }
  return absl::OkStatus();
}

absl::Status CheckHello(const Hello& h, int expected_rank, int size, size_t ring_bytes, const std::string& from) {
  if (h.magic != kHelloMagic) {
    return absl::FailedPreconditionError(absl::StrCat("ShmTransport: ", from, " is not a lockstep rank (bad handshake)"));
  }
  if (h.version != kVersion) {
    return absl::FailedPreconditionError(absl::StrCat("ShmTransport: ", from, " speaks protocol ", h.version,
                                                      ", this rank ", kVersion, "; use one lockstep build"));
  }
  if (h.size != size || (expected_rank >= 0 && h.rank != expected_rank) || h.rank < 0 || h.rank >= size) {
    return absl::FailedPreconditionError(absl::StrCat("ShmTransport: ", from, " says rank ", h.rank, " of ", h.size,
                                                      ", expected rank ", expected_rank < 0 ? std::string("?") :
                                                      absl::StrCat(expected_rank), " of ", size,
                                                      "; are two jobs sharing a store prefix?"));
  }
  if (h.ring_bytes != ring_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ShmTransport: ", from, " uses rings of ", h.ring_bytes, " bytes, this rank ", ring_bytes,
        " (slots x slot_bytes); give every rank the same ShmTransportOptions"));
  }
  return absl::OkStatus();
}

pid_t PeerPid(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return 0;
  return cred.pid;
}

absl::Status CheckPeerUser(int fd, const std::string& from) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return Errno("ShmTransport: SO_PEERCRED");
  if (cred.uid != ::geteuid()) {
    return absl::PermissionDeniedError(absl::StrCat("ShmTransport: ", from, " runs as uid ", cred.uid,
                                                    ", this rank as uid ", ::geteuid(),
                                                    "; every rank of a group must run as the same user"));
  }
  return absl::OkStatus();
}

// Progress of one transfer inside Run.
struct Progress {
  bool header_done = false;
  size_t done = 0;      // Single-copy sends: bytes the receiver acknowledged.
  size_t reported = 0;  // Bytes already passed to on_segment.
  // Single copy: the message is a descriptor; the pair's exposed/acked
  // counters stood at `base` before it; the payload is at `address` in the
  // sender; the sender exposed `exposed` bytes so far.
  bool single = false;
  uint64_t base = 0;
  uint64_t address = 0;
  size_t exposed = 0;
};

// Reads `n` bytes at `remote` in process `pid` into `local`.
// Returns errno (0: done).
int ReadRemote(pid_t pid, uint64_t remote, void* local, size_t n) {
  size_t done = 0;
  while (done < n) {
    iovec l{static_cast<char*>(local) + done, n - done};
    iovec r{reinterpret_cast<void*>(static_cast<uintptr_t>(remote + done)), n - done};
    const ssize_t got = ::process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (got == 0) return EFAULT;
    done += static_cast<size_t>(got);
  }
  return 0;
}

}  // namespace

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
  alignas(kLine) std::atomic<uint32_t> sleeping;
  // Set (release) once `reason` is written.
  alignas(kLine) std::atomic<uint32_t> aborted;
  uint32_t reason_bytes;
  char reason[kMaxAbortReason];
};
static_assert(sizeof(ShmTransport::Control) <= kControlBytes, "layout");

// One directed pair's ring, in the receiver's segment; the data follows.
struct ShmTransport::Ring {
  alignas(kLine) std::atomic<uint64_t> head;  // Bytes written (sender).
  alignas(kLine) std::atomic<uint64_t> tail;  // Bytes consumed (receiver).
  // Single copy: payload bytes the sender exposed, and those the receiver
  // copied, over every single-copy message of this pair so far.
  alignas(kLine) std::atomic<uint64_t> exposed;  // Sender.
  alignas(kLine) std::atomic<uint64_t> acked;    // Receiver.
  char* data() { return reinterpret_cast<char*>(this) + kRingHeaderBytes; }
};
static_assert(sizeof(ShmTransport::Ring) == kRingHeaderBytes, "layout");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared between processes");

absl::Status ValidateShmTransportOptions(const ShmTransportOptions& options) {
  if (options.timeout <= Milliseconds(0)) {
    return absl::InvalidArgumentError(absl::StrCat("ShmTransportOptions.timeout is ", options.timeout.count(),
                                                   " ms; it must be positive"));
  }
  if (options.slot_bytes < (4u << 10) || options.slot_bytes > (16u << 20) || options.slot_bytes % kLine != 0) {
    return absl::InvalidArgumentError(absl::StrCat("ShmTransportOptions.slot_bytes is ", options.slot_bytes,
                                                   "; it must be a multiple of 64 in [4096, 16777216]"));
  }
  if (options.slots < 2 || options.slots > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("ShmTransportOptions.slots is ", options.slots,
                                                   "; it must be in [2, 1024]"));
  }
  if (options.slot_bytes * static_cast<size_t>(options.slots) > (size_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("ShmTransportOptions.slots x slot_bytes is ",
                                                   options.slot_bytes * static_cast<size_t>(options.slots),
                                                   " bytes; a ring may hold at most 2^30"));
  }
  if (options.streaming_send_bytes == 0 || options.streaming_receive_bytes == 0) {
    return absl::InvalidArgumentError(
        "ShmTransportOptions.streaming_send_bytes and streaming_receive_bytes must be at least 1 (SIZE_MAX: never)");
  }
  if (options.single_copy_bytes != 0 && options.single_copy_bytes < kLine) {
    return absl::InvalidArgumentError(absl::StrCat("ShmTransportOptions.single_copy_bytes is ",
                                                   options.single_copy_bytes, "; it must be 0 (off) or at least 64"));
  }
  if (options.single_copy_bytes != 0 && options.single_copy_max_bytes < options.single_copy_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ShmTransportOptions.single_copy_max_bytes is ", options.single_copy_max_bytes,
        "; it must be at least single_copy_bytes (", options.single_copy_bytes, ") while single copy is on"));
  }
  if (options.spin_microseconds < 0 || options.spin_microseconds > 1000000) {
    return absl::InvalidArgumentError(absl::StrCat("ShmTransportOptions.spin_microseconds is ",
                                                   options.spin_microseconds, "; it must be in [0, 1000000]"));
  }
  return absl::OkStatus();
}

ShmTransport::ShmTransport(int rank, int size, const ShmTransportOptions& options)
    : rank_(rank), size_(size), options_(options),
      ring_bytes_(options.slot_bytes * static_cast<size_t>(options.slots)),
      segments_(static_cast<size_t>(size)), peers_(static_cast<size_t>(size)), tail_seen_(static_cast<size_t>(size)),
      single_copy_to_(static_cast<size_t>(size), 0), single_copy_refused_(static_cast<size_t>(size)),
      traffic_(size) {}

ShmTransport::~ShmTransport() {
  for (Mapping& m : segments_) {
    if (m.address != nullptr) ::munmap(m.address, m.bytes);
  }
}

absl::StatusOr<std::unique_ptr<ShmTransport>> ShmTransport::Create(Store& store, int rank, int size,
                                                                   const ShmTransportOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("ShmTransport: rank ", rank, " is not in [0, ", size, ")"));
  }
  LOCKSTEP_RETURN_IF_ERROR(ValidateShmTransportOptions(options));
  std::unique_ptr<ShmTransport> t(new ShmTransport(rank, size, options));
  if (size == 1) return t;
  const Deadline deadline = DeadlineIn(options.timeout);
  LOCKSTEP_ASSIGN_OR_RETURN(int64_t claims, store.Add(ClaimKey(rank), 1));
  if (claims != 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ShmTransport: RANK ", rank, " is claimed by another process of this group too: every process needs its "
        "own RANK (check the launcher's settings or the RANK/OMPI_COMM_WORLD_RANK/SLURM_PROCID variables)"));
  }

  // This rank's segment: control block and the rings its peers write into.
  // Sealed against resizing, so no peer can make our mapping fault.
  const size_t segment_bytes = SegmentBytes(t->ring_bytes_, size);
  Fd memfd(::memfd_create("lockstep-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!memfd.valid()) return Errno("ShmTransport: memfd_create");
  if (::ftruncate(memfd.get(), static_cast<off_t>(segment_bytes)) != 0) {
    return Errno(absl::StrCat("ShmTransport: sizing a ", segment_bytes, "-byte segment"));
  }
  if (::fcntl(memfd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return Errno("ShmTransport: sealing the segment");
  }
  void* mine = ::mmap(nullptr, segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd.get(), 0);
  if (mine == MAP_FAILED) return Errno("ShmTransport: mapping the segment");
  t->segments_[rank] = {mine, segment_bytes};
  Control* control = new (mine) Control();
  control->magic = kSegmentMagic;
  control->version = kVersion;
  control->rank = rank;
  control->size = size;
  control->ring_bytes = t->ring_bytes_;
  {
    uint64_t word = 0;
    if (::getrandom(&word, sizeof(word), 0) != static_cast<ssize_t>(sizeof(word))) {
      return Errno("ShmTransport: getrandom");
    }
    t->probe_word_ = word | 1;
    control->probe_address = reinterpret_cast<uintptr_t>(&t->probe_word_);
    control->probe_value = t->probe_word_;
  }
  for (int from = 0; from < size; ++from) {
    if (from != rank) new (t->RingOf(from, rank)) Ring();
  }
  t->doorbell_ = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!t->doorbell_.valid()) return Errno("ShmTransport: eventfd");

  // A listening socket in the abstract namespace under a random name: gone
  // with the process, never in the file system.
  uint8_t random[16];
  if (::getrandom(random, sizeof(random), 0) != static_cast<ssize_t>(sizeof(random))) {
    return Errno("ShmTransport: getrandom");
  }
  std::string name = "lockstep-shm-";
  for (uint8_t b : random) absl::StrAppend(&name, absl::Hex(b, absl::kZeroPad2));
  auto address_of = [](const std::string& n, sockaddr_un* a) {
    std::memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    std::memcpy(a->sun_path + 1, n.data(), n.size());  // sun_path[0] == 0: abstract.
    return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n.size());
  };
  Fd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listener.valid()) return Errno("ShmTransport: socket");
  sockaddr_un addr;
  socklen_t addr_len = address_of(name, &addr);
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), addr_len) != 0) {
    return Errno(absl::StrCat("ShmTransport: binding @", name));
  }
  if (::listen(listener.get(), size) != 0) return Errno("ShmTransport: listen");
  LOCKSTEP_RETURN_IF_ERROR(store.Set(AddressKey(rank), name));

  const Hello my_hello{kHelloMagic, kVersion, rank, size, t->ring_bytes_};
  const int my_fds[2] = {memfd.get(), t->doorbell_.get()};
  // Maps a peer's segment (checked: size, seals, header) and keeps its doorbell.
  auto adopt = [&](int peer, Fd (&fds)[2], const std::string& from) -> absl::Status {
    struct stat st{};
    if (::fstat(fds[0].get(), &st) != 0) return Errno("ShmTransport: fstat");
    const int seals = ::fcntl(fds[0].get(), F_GET_SEALS);
    if (static_cast<size_t>(st.st_size) != segment_bytes || seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
      return absl::FailedPreconditionError(absl::StrCat("ShmTransport: ", from, " sent a segment of ", st.st_size,
                                                        " bytes (seals ", seals, "), expected a sealed one of ",
                                                        segment_bytes, " bytes"));
    }
    void* p = ::mmap(nullptr, segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0].get(), 0);
    if (p == MAP_FAILED) return Errno(absl::StrCat("ShmTransport: mapping the segment of ", from));
    t->segments_[peer] = {p, segment_bytes};
    const Control* c = t->ControlOf(peer);
    if (c->magic != kSegmentMagic || c->rank != peer || c->size != size || c->ring_bytes != t->ring_bytes_) {
      return absl::FailedPreconditionError(absl::StrCat("ShmTransport: the segment of ", from,
                                                        " does not belong to rank ", peer, " of this group"));
    }
    t->peers_[peer].doorbell = std::move(fds[1]);
    return absl::OkStatus();
  };

  // Connect to every higher rank (a connect completes on the listener's
  // backlog, so nobody waits on another's accept), then accept every lower
  // rank, then read the higher ranks' replies.
  for (int peer = rank + 1; peer < size; ++peer) {
    LOCKSTEP_ASSIGN_OR_RETURN(std::string peer_name, store.Get(AddressKey(peer), options.timeout));
    const std::string from = absl::StrCat("rank ", peer, " (shm, @", peer_name, ")");
    if (peer_name.empty() || peer_name.size() > sizeof(addr.sun_path) - 1) {
      return absl::FailedPreconditionError(absl::StrCat("ShmTransport: ", from, " published a bad socket name"));
    }
    Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) return Errno("ShmTransport: socket");
    addr_len = address_of(peer_name, &addr);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), addr_len) != 0 && errno != EINPROGRESS) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ShmTransport: rank ", rank, " cannot reach ", from, ": ", std::strerror(errno),
          ". Shared memory needs every rank on this host and in this network namespace; use TCP between hosts"));
    }
    LOCKSTEP_RETURN_IF_ERROR(CheckPeerUser(fd.get(), from));
    LOCKSTEP_RETURN_IF_ERROR(SendHello(fd.get(), my_hello, my_fds, deadline, from));
    t->peers_[peer].socket = std::move(fd);
  }
  for (int accepted = 0; accepted < rank; ++accepted) {
    LOCKSTEP_ASSIGN_OR_RETURN(Fd fd, Accept(listener.get(), deadline, absl::StrCat("the lower ranks of ", rank)));
    const std::string from = absl::StrCat("a connection to rank ", rank, " (shm, pid ", PeerPid(fd.get()), ")");
    LOCKSTEP_RETURN_IF_ERROR(CheckPeerUser(fd.get(), from));
    Hello hello{};
    Fd fds[2];
    LOCKSTEP_RETURN_IF_ERROR(RecvHello(fd.get(), &hello, fds, deadline, from));
    LOCKSTEP_RETURN_IF_ERROR(CheckHello(hello, -1, size, t->ring_bytes_, from));
    const int peer = hello.rank;
    if (peer >= rank || t->peers_[peer].socket.valid()) {
      return absl::FailedPreconditionError(absl::StrCat("ShmTransport: rank ", peer, " connected to rank ", rank,
                                                        " unexpectedly (twice, or from above): is RANK=", peer,
                                                        " given to two processes?"));
    }
    LOCKSTEP_RETURN_IF_ERROR(adopt(peer, fds, from));
    LOCKSTEP_RETURN_IF_ERROR(SendHello(fd.get(), my_hello, my_fds, deadline, from));
    t->peers_[peer].pid = PeerPid(fd.get());
    t->peers_[peer].socket = std::move(fd);
  }
  for (int peer = rank + 1; peer < size; ++peer) {
    Peer& p = t->peers_[peer];
    p.pid = PeerPid(p.socket.get());
    const std::string from = t->PeerName(peer);
    Hello hello{};
    Fd fds[2];
    LOCKSTEP_RETURN_IF_ERROR(RecvHello(p.socket.get(), &hello, fds, deadline, from));
    LOCKSTEP_RETURN_IF_ERROR(CheckHello(hello, peer, size, t->ring_bytes_, from));
    LOCKSTEP_RETURN_IF_ERROR(adopt(peer, fds, from));
  }
  LOCKSTEP_RETURN_IF_ERROR(t->AgreeOnSingleCopy(deadline));
  // The memfd and listener close here: the mappings keep the memory, and
  // nothing can connect any more.
  return t;
}

ShmTransport::Control* ShmTransport::ControlOf(int rank) const {
  return static_cast<Control*>(segments_[rank].address);
}

ShmTransport::Ring* ShmTransport::RingOf(int from, int to) const {
  char* base = static_cast<char*>(segments_[to].address);
  return reinterpret_cast<Ring*>(base + kControlBytes + RingStride(ring_bytes_) * static_cast<size_t>(from));
}

void ShmTransport::RingDoorbell(int peer) const {
  const uint64_t one = 1;
  (void)!::write(peers_[peer].doorbell.get(), &one, sizeof(one));
}

absl::Status ShmTransport::AgreeOnSingleCopy(Deadline deadline) {
  // What this rank can read: verdict[peer] is 1 when the peer may send us
  // single-copy messages.
  std::vector<char> verdict(static_cast<size_t>(size_), 0);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    if (options_.single_copy_bytes == 0) {
      single_copy_refused_[peer] = "single copy off";
      continue;
    }
    const Control* c = ControlOf(peer);
    uint64_t word = 0;
    const int err = ReadRemote(peers_[peer].pid, c->probe_address, &word, sizeof(word));
    if (err != 0) {
      // EPERM (ptrace restrictions), ESRCH (another pid namespace): the ring.
      single_copy_refused_[peer] = absl::StrCat("process_vm_readv from ", PeerName(peer), ": ", std::strerror(err));
    } else if (word != c->probe_value) {
      single_copy_refused_[peer] = absl::StrCat("process_vm_readv from ", PeerName(peer),
                                                " read another process's memory (pid namespaces differ?)");
    } else {
      verdict[peer] = 1;
    }
  }
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    const char b = verdict[peer];
    while (true) {
      const ssize_t n = ::send(peers_[peer].socket.get(), &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n == 1) break;
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        pollfd p{peers_[peer].socket.get(), POLLOUT, 0};
        if (::poll(&p, 1, PollTimeoutMs(deadline)) == 0 && SteadyClock::now() >= deadline) {
          return absl::DeadlineExceededError(
              absl::StrCat("ShmTransport: timed out telling ", PeerName(peer), " whether single copy works"));
        }
        continue;
      }
      return Errno(absl::StrCat("ShmTransport: telling ", PeerName(peer), " whether single copy works"));
    }
  }
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    char b = 0;
    while (true) {
      const ssize_t n = ::recv(peers_[peer].socket.get(), &b, 1, MSG_DONTWAIT);
      if (n == 1) break;
      if (n == 0) {
        return absl::UnavailableError(
            absl::StrCat("ShmTransport: ", PeerName(peer), " closed the connection during set-up"));
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        return Errno(absl::StrCat("ShmTransport: learning from ", PeerName(peer), " whether single copy works"));
      }
      pollfd p{peers_[peer].socket.get(), POLLIN, 0};
      if (::poll(&p, 1, PollTimeoutMs(deadline)) == 0 && SteadyClock::now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "ShmTransport: timed out waiting for ", PeerName(peer), " to say whether single copy works"));
      }
    }
    if (options_.single_copy_bytes != 0 && b == 1) {
      single_copy_to_[peer] = 1;
    } else if (single_copy_refused_[peer].empty()) {
      single_copy_refused_[peer] = absl::StrCat(PeerName(peer), " cannot read this rank's memory or has single copy off");
    }
  }
  return absl::OkStatus();
}

bool ShmTransport::SingleCopyTo(int peer) const {
  return peer >= 0 && peer < size_ && single_copy_to_[peer] != 0;
}

std::string ShmTransport::CopyPath() const {
  if (options_.single_copy_bytes == 0) return "ring only (single copy off)";
  std::vector<std::string> single, ring;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    if (single_copy_to_[peer] != 0) {
      single.push_back(absl::StrCat(peer));
    } else {
      ring.push_back(absl::StrCat(peer, " (", single_copy_refused_[peer], ")"));
    }
  }
  if (single.empty() && ring.empty()) return "ring only (one rank)";
  std::string out;
  if (!single.empty()) {
    out = absl::StrCat("single-copy (process_vm_readv) for messages of ", options_.single_copy_bytes, "..",
                       options_.single_copy_max_bytes, " bytes to ",
                       ring.empty() ? std::string("every peer") : absl::StrCat("ranks ", absl::StrJoin(single, ",")));
  }
  if (!ring.empty()) {
    absl::StrAppend(&out, out.empty() ? "" : "; ", "ring only to ranks ", absl::StrJoin(ring, ", "));
  }
  return out;
}

std::string ShmTransport::PeerName(int peer) const {
  if (peer < 0 || peer >= size_ || peer == rank_) return absl::StrCat("rank ", peer);
  return absl::StrCat("rank ", peer, " (shm, pid ", peers_[peer].pid, ")");
}

void ShmTransport::Abort(absl::string_view reason) {
  if (aborted_.exchange(true) || size_ == 1) return;
  Control* c = ControlOf(rank_);
  const size_t n = std::min(reason.size(), kMaxAbortReason);
  std::memcpy(c->reason, reason.data(), n);
  c->reason_bytes = static_cast<uint32_t>(n);
  c->aborted.store(1, std::memory_order_release);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    RingDoorbell(peer);
    ::shutdown(peers_[peer].socket.get(), SHUT_RDWR);
  }
  // Our own waiting thread, if any, wakes up and sees the flag.
  const uint64_t one = 1;
  (void)!::write(doorbell_.get(), &one, sizeof(one));
}

TrafficCounters ShmTransport::Traffic() const { return traffic_.Snapshot(); }

absl::Status ShmTransport::Exchange(absl::Span<Transfer> transfers, MessageTag tag, Deadline deadline) {
  return Run(transfers, tag, deadline, nullptr);
}

absl::Status ShmTransport::ExchangeOpen(TransferFeed& feed, Deadline deadline) {
  return Run({}, MessageTag{}, deadline, &feed);
}

absl::Status ShmTransport::PeerGoneError(int peer, uint64_t seq) const {
  const Control* c = ControlOf(peer);
  if (c->aborted.load(std::memory_order_acquire) != 0) {
    const std::string reason(c->reason, std::min<size_t>(c->reason_bytes, kMaxAbortReason));
    return absl::UnavailableError(absl::StrCat(PeerName(peer), " aborted during op #", seq, " because: ", reason));
  }
  return absl::UnavailableError(absl::StrCat(
      PeerName(peer), " closed the connection during op #", seq,
      " (the process died, exited, or aborted after an error of its own; see its log)"));
}

absl::Status ShmTransport::Run(absl::Span<Transfer> initial, MessageTag tag, Deadline deadline, TransferFeed* feed) {
  if (aborted_.load(std::memory_order_relaxed)) {
    const Control* c = size_ > 1 ? ControlOf(rank_) : nullptr;
    return absl::FailedPreconditionError(absl::StrCat(
        "ShmTransport: rank ", rank_, " aborted after an earlier error",
        c != nullptr ? absl::StrCat(" (", std::string(c->reason, std::min<size_t>(c->reason_bytes, kMaxAbortReason)),
                                    ")")
                     : "",
        "; create a new communicator"));
  }
  // Streams: (peer, direction), in call order (collectives/transport/transfer_streams.h).
  TransferStreams<Progress> streams(initial, rank_, size_, "ShmTransport");
  constexpr size_t kNone = TransferStreams<Progress>::kNone;
  auto at = [&](size_t i) -> Transfer& { return streams.at(i); };
  auto& current = streams.current;
  auto& next = streams.next;
  auto& progress = streams.progress;
  size_t& total = streams.total;
  size_t& remaining = streams.remaining;
  auto poll_feed = [&]() { return streams.PollFeed(feed); };
  LOCKSTEP_RETURN_IF_ERROR(streams.Start(feed));
  auto tag_of = [&](const Transfer& t) {
    return MessageTag{t.seq >= 0 ? static_cast<uint64_t>(t.seq) : tag.seq,
                      t.tag >= 0 ? static_cast<uint32_t>(t.tag) : tag.tag,
                      t.element != 0 ? t.element : tag.element};
  };
  const uint64_t capacity = ring_bytes_;
  const size_t slot = options_.slot_bytes;
  Control* const me = size_ > 1 ? ControlOf(rank_) : nullptr;
  // Tells `peer` (if it sleeps) that an index it may wait on moved. The
  // fence orders our index store before the load of its flag; the sleeper
  // orders its flag store before its index loads.
  auto notify = [&](int peer) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (ControlOf(peer)->sleeping.load(std::memory_order_relaxed) != 0) RingDoorbell(peer);
  };
  // Whether a send goes single-copy.
  auto single_copy = [&](const Transfer& t) {
    return options_.single_copy_bytes != 0 && t.bytes >= options_.single_copy_bytes &&
           t.bytes <= options_.single_copy_max_bytes && single_copy_to_[t.peer] != 0;
  };
  // Whether `peer`'s socket hung up (it died or aborted); polls it.
  auto peer_hung_up = [&](int peer) {
    if (peers_[peer].gone) return true;
    pollfd p{peers_[peer].socket.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) > 0 && p.revents != 0) peers_[peer].gone = true;
    return peers_[peer].gone;
  };
  // One step of stream `stream`: at most one slot moved. Returns whether
  // anything moved.
  auto step = [&](size_t stream, bool* moved) -> absl::Status {
    const size_t i = current[stream];
    Transfer& t = at(i);
    Progress& p = progress[i];
    const MessageTag message_tag = tag_of(t);
    if (t.kind == Transfer::Kind::kSend && (p.single || (!p.header_done && single_copy(t)))) {
      // Single copy: a descriptor in the ring, then the payload exposed as
      // it becomes ready; done when the receiver acknowledged every byte.
      Ring* ring = RingOf(rank_, t.peer);
      bool publish = false;
      if (!p.header_done) {
        const uint64_t head = ring->head.load(std::memory_order_relaxed);
        if (capacity - (head - tail_seen_[t.peer]) < kLine) {
          tail_seen_[t.peer] = ring->tail.load(std::memory_order_acquire);
          if (capacity - (head - tail_seen_[t.peer]) < kLine) return absl::OkStatus();
        }
        p.single = true;
        p.base = ring->exposed.load(std::memory_order_relaxed);  // Ours alone.
        MessageHeader h = MakeMessageHeader(message_tag, t.bytes, kSingleCopyMagic);
        h.address = reinterpret_cast<uintptr_t>(t.data);
        h.base = p.base;
        std::memcpy(ring->data() + head % capacity, &h, sizeof(h));
        ring->head.store(head + kLine, std::memory_order_release);
        p.header_done = true;
        publish = true;
      }
      const size_t allowed = t.ready ? std::min(t.ready(), t.bytes) : t.bytes;
      if (allowed > p.exposed) {
        p.exposed = allowed;
        ring->exposed.store(p.base + allowed, std::memory_order_release);
        publish = true;
      }
      if (publish) {
        notify(t.peer);
        *moved = true;
      }
      const size_t acked = static_cast<size_t>(ring->acked.load(std::memory_order_acquire) - p.base);
      if (acked > p.done) {
        traffic_.Sent(t.peer, acked - p.done);
        p.done = acked;
        *moved = true;
      }
    } else if (t.kind == Transfer::Kind::kSend) {
      Ring* ring = RingOf(rank_, t.peer);
      const uint64_t head = ring->head.load(std::memory_order_relaxed);  // Ours alone.
      // The receiver's tail as last seen: reading it costs a cache miss
      // (the receiver wrote it), so it is read again only when the space
      // it leaves is not enough for what this step would write.
      const size_t allowed = t.ready ? std::min(t.ready(), t.bytes) : t.bytes;
      const int64_t want = (p.header_done ? 0 : static_cast<int64_t>(kLine)) +
                           static_cast<int64_t>(std::min(allowed - p.done, slot));
      int64_t free = static_cast<int64_t>(capacity) - static_cast<int64_t>(head - tail_seen_[t.peer]);
      if (free < want) {
        tail_seen_[t.peer] = ring->tail.load(std::memory_order_acquire);
        free = static_cast<int64_t>(capacity) - static_cast<int64_t>(head - tail_seen_[t.peer]);
      }
      uint64_t new_head = head;
      if (!p.header_done) {
        if (free < static_cast<int64_t>(kLine)) return absl::OkStatus();
        const MessageHeader h = MakeMessageHeader(message_tag, t.bytes);
        std::memcpy(ring->data() + new_head % capacity, &h, sizeof(h));
        new_head += kLine;
        free -= kLine;
        p.header_done = true;
      }
      if (p.done < allowed && free > 0) {
        const uint64_t pos = new_head % capacity;
        const size_t n = std::min({allowed - p.done, static_cast<size_t>(free), static_cast<size_t>(capacity - pos),
                                   slot});
        Copy(ring->data() + pos, static_cast<const char*>(t.data) + p.done, n,
             t.bytes >= options_.streaming_send_bytes);
        p.done += n;
        new_head += n;
        traffic_.Sent(t.peer, n);
      }
      // The end of a message is padded to a cache line: the next header
      // never wraps and payloads stay aligned.
      if (p.done == t.bytes) new_head = RoundUp(new_head, kLine);
      if (new_head != head) {
        ring->head.store(new_head, std::memory_order_release);
        notify(t.peer);
        *moved = true;
      }
    } else {
      Ring* ring = RingOf(t.peer, rank_);
      const uint64_t tail = ring->tail.load(std::memory_order_relaxed);  // Ours alone.
      const uint64_t head = ring->head.load(std::memory_order_acquire);
      uint64_t new_tail = tail;
      if (!p.header_done) {
        if (head - tail < kLine) return absl::OkStatus();
        MessageHeader h;
        std::memcpy(&h, ring->data() + tail % capacity, sizeof(h));
        new_tail += kLine;
        p.header_done = true;
        if (h.magic == kSingleCopyMagic) {
          if (peers_[t.peer].pid <= 0) {
            return absl::InternalError(absl::StrCat("ShmTransport: ", PeerName(t.peer), " sent op #", h.seq,
                                                    " single-copy, but rank ", rank_,
                                                    " does not know its pid; give every rank one lockstep build"));
          }
          p.single = true;
          p.base = h.base;
          p.address = h.address;
          h.magic = kMessageMagic;  // Checked as any message's below.
        }
        if (t.route && h.magic == kMessageMagic) {
          LOCKSTEP_ASSIGN_OR_RETURN(t.data, t.route(MessageTag{h.seq, h.tag, static_cast<uint8_t>(h.element)},
                                                    h.bytes));
          t.bytes = h.bytes;
        } else {
          LOCKSTEP_RETURN_IF_ERROR(CheckMessageHeader(h, message_tag, t.bytes, PeerName(t.peer), rank_));
        }
      }
      const uint64_t available = head - new_tail;
      if (p.single) {
        // Single copy: read what the sender exposed straight from its
        // memory, a piece at a time, and acknowledge it.
        if (new_tail != tail) {
          ring->tail.store(new_tail, std::memory_order_release);
          *moved = true;
        }
        const size_t exposed = static_cast<size_t>(
            std::min<uint64_t>(ring->exposed.load(std::memory_order_acquire) - p.base, t.bytes));
        if (exposed > p.done) {
          const size_t n = std::min(exposed - p.done, t.consume ? kSingleCopyStage : kSingleCopyPiece);
          char* dst;
          if (t.consume) {
            if (staging_ == nullptr) staging_.reset(new char[kSingleCopyStage]);
            dst = staging_.get();
          } else {
            dst = static_cast<char*>(t.data) + p.done;
          }
          if (const int err = ReadRemote(peers_[t.peer].pid, p.address + p.done, dst, n); err != 0) {
            if (err == ESRCH || peer_hung_up(t.peer)) return PeerGoneError(t.peer, message_tag.seq);
            return absl::InternalError(absl::StrCat(
                "ShmTransport: rank ", rank_, " could not read bytes [", p.done, ", ", p.done + n, ") of op #",
                message_tag.seq, " ", DescribeTag(message_tag.tag), " (", t.bytes, " bytes) from the memory of ",
                PeerName(t.peer), " with process_vm_readv: ", std::strerror(err),
                ". The sender's buffer must stay valid until its send completes; set "
                "ShmTransportOptions.single_copy_bytes = 0 to use the ring only"));
          }
          // A pid is reused only after its process died, which hangs up its
          // socket: with the socket still open at the end, every piece came
          // from the peer.
          if (p.done + n == t.bytes && peer_hung_up(t.peer)) return PeerGoneError(t.peer, message_tag.seq);
          if (t.consume) LOCKSTEP_RETURN_IF_ERROR(t.consume(p.done, dst, n));
          p.done += n;
          traffic_.Received(t.peer, n);
          single_copy_received_.fetch_add(n, std::memory_order_relaxed);
          ring->acked.store(p.base + p.done, std::memory_order_release);
          notify(t.peer);
          *moved = true;
        }
      } else if (p.done < t.bytes && available > 0) {
        const uint64_t pos = new_tail % capacity;
        const size_t n = std::min({t.bytes - p.done, static_cast<size_t>(available),
                                   static_cast<size_t>(capacity - pos), slot});
        const char* src = ring->data() + pos;
        if (t.consume) {
          LOCKSTEP_RETURN_IF_ERROR(t.consume(p.done, src, n));
        } else {
          Copy(static_cast<char*>(t.data) + p.done, src, n, t.bytes >= options_.streaming_receive_bytes);
        }
        p.done += n;
        new_tail += n;
        traffic_.Received(t.peer, n);
      }
      if (p.done == t.bytes) new_tail = RoundUp(new_tail, kLine);
      if (!p.single && new_tail != tail) {
        ring->tail.store(new_tail, std::memory_order_release);
        notify(t.peer);
        *moved = true;
      }
      if (t.on_segment) {
        const size_t seg = t.segment_bytes == 0 ? std::max<size_t>(t.bytes, 1) : t.segment_bytes;
        while (p.reported < t.bytes) {
          const size_t len = std::min(seg, t.bytes - p.reported);
          if (p.done - p.reported < len) break;
          LOCKSTEP_RETURN_IF_ERROR(t.on_segment(p.reported, len));
          p.reported += len;
        }
      }
    }
    if (p.header_done && p.done == t.bytes) {
      if (t.kind == Transfer::Kind::kRecv && t.on_segment && t.bytes == 0) {
        LOCKSTEP_RETURN_IF_ERROR(t.on_segment(0, 0));
      }
      current[stream] = next[i];
      --remaining;
      *moved = true;
      if (t.on_done) LOCKSTEP_RETURN_IF_ERROR(t.on_done());
    }
    return absl::OkStatus();
  };
  // Whether stream's transfer could move now (indices only; no side effects).
  auto could_move = [&](size_t stream) {
    const Transfer& t = at(current[stream]);
    const Progress& p = progress[current[stream]];
    if (p.single) {
      const bool send = t.kind == Transfer::Kind::kSend;
      const Ring* ring = send ? RingOf(rank_, t.peer) : RingOf(t.peer, rank_);
      if (t.kind == Transfer::Kind::kRecv) {
        return ring->exposed.load(std::memory_order_acquire) - p.base > p.done;
      }
      const size_t allowed = t.ready ? std::min(t.ready(), t.bytes) : t.bytes;
      return allowed > p.exposed || ring->acked.load(std::memory_order_acquire) - p.base > p.done;
    }
    if (t.kind == Transfer::Kind::kSend) {
      const Ring* ring = RingOf(rank_, t.peer);
      const uint64_t used = ring->head.load(std::memory_order_relaxed) - ring->tail.load(std::memory_order_acquire);
      if (!p.header_done) return capacity - used >= kLine;
      const size_t allowed = t.ready ? std::min(t.ready(), t.bytes) : t.bytes;
      return p.done < allowed && used < capacity;
    }
    const Ring* ring = RingOf(t.peer, rank_);
    return ring->head.load(std::memory_order_acquire) != ring->tail.load(std::memory_order_relaxed);
  };
  // The first peer of a pending stream that aborted or hung up, or -1.
  auto gone_peer = [&]() {
    for (size_t stream = 0; stream < current.size(); ++stream) {
      if (current[stream] == kNone) continue;
      const int peer = at(current[stream]).peer;
      if (peers_[peer].gone || ControlOf(peer)->aborted.load(std::memory_order_acquire) != 0) return peer;
    }
    return -1;
  };
  auto own_abort = [&]() {
    return absl::UnavailableError(absl::StrCat(
        "ShmTransport: rank ", rank_, " was aborted during op #", total > 0 ? tag_of(at(0)).seq : tag.seq, " (",
        std::string(me->reason, std::min<size_t>(me->reason_bytes, kMaxAbortReason)), ")"));
  };

  absl::InlinedVector<pollfd, 16> fds;
  absl::InlinedVector<int, 16> fd_peer;
  const auto spin = std::chrono::microseconds(options_.spin_microseconds);
  constexpr auto kPauseOnly = std::chrono::microseconds(20);
  Deadline spin_start = SteadyClock::now(), now = spin_start;
  uint32_t idle_rounds = 0;
  while (true) {
    if (remaining == 0) {
      const size_t before = total;
      LOCKSTEP_RETURN_IF_ERROR(poll_feed());
      if (total == before) break;
    }
    bool moved = false;
    for (size_t stream = 0; stream < current.size(); ++stream) {
      if (current[stream] == kNone) continue;
      LOCKSTEP_RETURN_IF_ERROR(step(stream, &moved));
    }
    if (feed != nullptr) {
      const size_t before = total;
      LOCKSTEP_RETURN_IF_ERROR(poll_feed());
      moved |= total != before;
    }
    if (remaining == 0) continue;
    if (moved) {
      idle_rounds = 0;
      continue;
    }
    // Nothing moved. A peer that is gone cannot move it any more.
    if (const int peer = gone_peer(); peer >= 0) {
      const size_t stream = current[2 * peer] != kNone ? 2 * peer : 2 * peer + 1;
      return PeerGoneError(peer, tag_of(at(current[stream])).seq);
    }
    if (me->aborted.load(std::memory_order_acquire) != 0) return own_abort();
    // Spinning: the clock is read every 16th round only. For the first
    // kPauseOnly the core just pauses (a peer on its own core answers in
    // about a microsecond); after that each round yields the core, in case
    // the peer waits for it (more ranks than cores).
    ++idle_rounds;
    if (idle_rounds == 1 || (idle_rounds & 15) == 0) now = SteadyClock::now();
    if (idle_rounds == 1) spin_start = now;
    if (now < spin_start + spin && now < deadline) {
      if (now < spin_start + kPauseOnly) {
        CpuRelax();
      } else {
        sched_yield();
      }
      continue;
    }
    now = SteadyClock::now();
    if (now >= deadline) break;
    // Sleep on the doorbell. Announce it, then look once more (a writer
    // that moved an index before seeing the flag will not ring).
    fds.clear();
    fd_peer.clear();
    bool any_waits = false;
    for (size_t stream = 0; stream < current.size(); ++stream) {
      if (current[stream] == kNone) continue;
      const Transfer& t = at(current[stream]);
      const Progress& p = progress[current[stream]];
      if (t.kind == Transfer::Kind::kSend && p.header_done) {
        const size_t allowed = t.ready ? std::min(t.ready(), t.bytes) : t.bytes;
        // Waits for our own receives (a single-copy send: with every
        // exposed byte acknowledged).
        if (p.single ? p.exposed >= allowed && p.done >= p.exposed : p.done >= allowed) continue;
      }
      any_waits = true;
      if (std::find(fd_peer.begin(), fd_peer.end(), t.peer) == fd_peer.end()) {
        fds.push_back({peers_[t.peer].socket.get(), POLLIN, 0});
        fd_peer.push_back(t.peer);
      }
    }
    if (!any_waits) {
      return absl::InternalError("ShmTransport::Exchange: every pending send waits for data that no receive will produce");
    }
    fds.push_back({doorbell_.get(), POLLIN, 0});
    const bool wake = feed != nullptr && feed->wake_fd() >= 0;
    if (wake) fds.push_back({feed->wake_fd(), POLLIN, 0});
    me->sleeping.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    bool ready_now = false;
    for (size_t stream = 0; stream < current.size() && !ready_now; ++stream) {
      if (current[stream] != kNone && could_move(stream)) ready_now = true;
    }
    if (!ready_now) {
      int timeout_ms = PollTimeoutMs(deadline);
      if (feed != nullptr && !wake) timeout_ms = std::min(timeout_ms, 1);
      const int rc = ::poll(fds.data(), fds.size(), timeout_ms);
      if (rc < 0 && errno != EINTR) {
        me->sleeping.store(0, std::memory_order_relaxed);
        return Errno("ShmTransport: poll");
      }
      for (size_t k = 0; k < fd_peer.size(); ++k) {
        if (fds[k].revents != 0) peers_[fd_peer[k]].gone = true;  // Nothing is sent on it: EOF or error.
      }
      uint64_t drained;
      (void)!::read(doorbell_.get(), &drained, sizeof(drained));
    }
    me->sleeping.store(0, std::memory_order_relaxed);
    idle_rounds = 0;
  }
  if (remaining == 0) return absl::OkStatus();
  return ExchangeTimeoutError(total > 0 ? tag_of(at(0)).seq : tag.seq, rank_,
                              streams.InFlight([this](int peer) { return PeerName(peer); }));
}


}  // namespace lockstep
