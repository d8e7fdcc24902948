// ShmTransport's set-up: the options' checks, this rank's segment and
// doorbell, the connections that pass segments between the ranks, and the
// agreement on single copy. See shm_transport.h.
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/transport/hello_acceptor.h"
#include "collectives/transport/shm/shm_copy.h"
#include "collectives/transport/shm/shm_layout.h"
#include "collectives/transport/shm/shm_transport.h"
#include "collectives/transport/tcp/rank_handshake.h"
#include "collectives/transport/tcp/socket.h"
#include "core/status.h"

namespace lockstep {

using shm_internal::Errno;
using shm_internal::kHelloMagic;
using shm_internal::kLine;
using shm_internal::kSegmentMagic;
using shm_internal::kVersion;

namespace {

// What two ranks tell each other on their connection, with their memfd and
// eventfd attached.
// With a group secret, `mac` proves the sender knows it: a connector's is
// rank_handshake::ConnectMac over the acceptor's challenge (published in the
// store with its address) and its own fresh nonce; the acceptor's reply
// carries AcceptMac over that nonce.
struct Hello {
  uint32_t magic;
  uint32_t version;
  int32_t rank;
  int32_t size;
  uint64_t ring_bytes;
  rank_handshake::Nonce nonce;
  rank_handshake::Mac mac;
};
static_assert(sizeof(Hello) == 72, "wire layout");

std::string AddressKey(int rank) { return absl::StrCat("shm_transport/", rank); }
std::string ChallengeKey(int rank) { return absl::StrCat("shm_transport/", rank, "/challenge"); }
std::string ClaimKey(int rank) { return absl::StrCat("shm_transport/", rank, "/claims"); }

// The abstract-namespace address of `name` (sun_path[0] == 0), and its length.
socklen_t AbstractAddress(const std::string& name, sockaddr_un* a) {
  std::memset(a, 0, sizeof(*a));
  a->sun_family = AF_UNIX;
  std::memcpy(a->sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

// Waits until `fd` is ready for `events`; false once the deadline passed.
bool AwaitFd(int fd, short events, Deadline deadline) {
  pollfd p{fd, events, 0};
  return !(::poll(&p, 1, PollTimeoutMs(deadline)) == 0 && SteadyClock::now() >= deadline);
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
    if (!AwaitFd(fd, POLLOUT, deadline)) {
      return absl::DeadlineExceededError(absl::StrCat("ShmTransport: timed out sending the hello to ", peer));
    }
  }
}

// Receives a Hello and the two descriptors sent with it.
absl::Status RecvHello(int fd, Hello* hello, Fd (&fds)[2], Deadline deadline, const std::string& peer) {
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
  std::vector<Fd> passed;
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
      TakePassedFds(msg, 2, &passed);
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      return absl::UnavailableError(absl::StrCat("ShmTransport: ", peer, " closed the connection during set-up"));
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return Errno(absl::StrCat("ShmTransport: receiving the hello from ", peer));
    }
    if (!AwaitFd(fd, POLLIN, deadline)) {
      return absl::DeadlineExceededError(absl::StrCat("ShmTransport: timed out waiting for the hello of ", peer));
    }
  }
  if (passed.size() != 2) {
    return absl::FailedPreconditionError(
        absl::StrCat("ShmTransport: ", peer, " sent no shared segment with its hello; is it a lockstep rank?"));
  }
  fds[0] = std::move(passed[0]);
  fds[1] = std::move(passed[1]);
  return absl::OkStatus();
}

absl::Status CheckHello(const Hello& h, int expected_rank, int size, size_t ring_bytes, const std::string& from) {
  if (h.magic != kHelloMagic) {
    return absl::FailedPreconditionError(
        absl::StrCat("ShmTransport: ", from, " is not a lockstep rank (bad handshake)"));
  }
  if (h.version != kVersion) {
    return absl::FailedPreconditionError(absl::StrCat("ShmTransport: ", from, " speaks protocol ", h.version,
                                                      ", this rank ", kVersion, "; use one lockstep build"));
  }
  if (h.size != size || (expected_rank >= 0 && h.rank != expected_rank) || h.rank < 0 || h.rank >= size) {
    return absl::FailedPreconditionError(
        absl::StrCat("ShmTransport: ", from, " says rank ", h.rank, " of ", h.size, ", expected rank ",
                     expected_rank < 0 ? std::string("?") : absl::StrCat(expected_rank), " of ", size,
                     "; are two jobs sharing a store prefix?"));
  }
  if (h.ring_bytes != ring_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("ShmTransport: ", from, " uses rings of ", h.ring_bytes, " bytes, this rank ", ring_bytes,
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

}  // namespace

// The steps of ShmTransport::Create, in order (Run). The memfd and the
// listener close with this object: the mappings keep the memory, and nothing
// can connect any more.
class ShmTransport::Setup {
 public:
  Setup(ShmTransport& t, Store& store)
      : t_(t),
        store_(store),
        deadline_(DeadlineIn(t.options_.timeout)),
        segment_bytes_(shm_internal::SegmentBytes(t.ring_bytes_, t.size_)),
        hello_{kHelloMagic, kVersion, t.rank_, t.size_, t.ring_bytes_, {}, {}} {}

  absl::Status Run() {
    LOCKSTEP_ASSIGN_OR_RETURN(challenge_, rank_handshake::RandomNonce());
    LOCKSTEP_RETURN_IF_ERROR(ClaimRank());
    LOCKSTEP_RETURN_IF_ERROR(CreateSegment());
    LOCKSTEP_RETURN_IF_ERROR(Listen());
    // Connect to every higher rank (a connect completes on the listener's
    // backlog, so nobody waits on another's accept), then accept every lower
    // rank, then read the higher ranks' replies.
    LOCKSTEP_RETURN_IF_ERROR(ConnectToHigherRanks());
    LOCKSTEP_RETURN_IF_ERROR(AcceptLowerRanks());
    LOCKSTEP_RETURN_IF_ERROR(ReadHigherRanksReplies());
    return AgreeOnSingleCopy();
  }

 private:
  // Fails when another process of the group took this rank too.
  absl::Status ClaimRank() {
    LOCKSTEP_ASSIGN_OR_RETURN(int64_t claims, store_.Add(ClaimKey(t_.rank_), 1));
    if (claims == 1) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "ShmTransport: RANK ", t_.rank_,
        " is claimed by another process of this group too: every process needs its "
        "own RANK (check the launcher's settings or the RANK/OMPI_COMM_WORLD_RANK/SLURM_PROCID variables)"));
  }

  // This rank's segment (control block and the rings its peers write into)
  // and its doorbell. Sealed against resizing, so no peer can make our
  // mapping fault.
  absl::Status CreateSegment() {
    memfd_ = Fd(::memfd_create("lockstep-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!memfd_.valid()) return Errno("ShmTransport: memfd_create");
    if (::ftruncate(memfd_.get(), static_cast<off_t>(segment_bytes_)) != 0) {
      return Errno(absl::StrCat("ShmTransport: sizing a ", segment_bytes_, "-byte segment"));
    }
    if (::fcntl(memfd_.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      return Errno("ShmTransport: sealing the segment");
    }
    void* mine = ::mmap(nullptr, segment_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, memfd_.get(), 0);
    if (mine == MAP_FAILED) return Errno("ShmTransport: mapping the segment");
    t_.segments_[t_.rank_] = {mine, segment_bytes_};
    Control* control = new (mine) Control();
    control->magic = kSegmentMagic;
    control->version = kVersion;
    control->rank = t_.rank_;
    control->size = t_.size_;
    control->ring_bytes = t_.ring_bytes_;
    uint64_t word = 0;
    if (::getrandom(&word, sizeof(word), 0) != static_cast<ssize_t>(sizeof(word))) {
      return Errno("ShmTransport: getrandom");
    }
    t_.probe_word_ = word | 1;
    control->probe_address = reinterpret_cast<uintptr_t>(&t_.probe_word_);
    control->probe_value = t_.probe_word_;
    for (int from = 0; from < t_.size_; ++from) {
      if (from != t_.rank_) new (t_.RingOf(from, t_.rank_)) Ring();
    }
    t_.doorbell_ = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!t_.doorbell_.valid()) return Errno("ShmTransport: eventfd");
    return absl::OkStatus();
  }

  // A listening socket in the abstract namespace under a random name, gone
  // with the process and never in the file system; the name goes to the store.
  absl::Status Listen() {
    uint8_t random[16];
    if (::getrandom(random, sizeof(random), 0) != static_cast<ssize_t>(sizeof(random))) {
      return Errno("ShmTransport: getrandom");
    }
    std::string name = "lockstep-shm-";
    for (uint8_t b : random) absl::StrAppend(&name, absl::Hex(b, absl::kZeroPad2));
    listener_ = Fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!listener_.valid()) return Errno("ShmTransport: socket");
    sockaddr_un addr;
    const socklen_t addr_len = AbstractAddress(name, &addr);
    if (::bind(listener_.get(), reinterpret_cast<sockaddr*>(&addr), addr_len) != 0) {
      return Errno(absl::StrCat("ShmTransport: binding @", name));
    }
    // A backlog beyond the group's size: strangers' connections queue
    // beside the real ranks' instead of refusing them.
    if (::listen(listener_.get(), t_.size_ + 64) != 0) return Errno("ShmTransport: listen");
    listener_name_ = name;
    // The challenge first: a connector proves it read this rendezvous's.
    LOCKSTEP_RETURN_IF_ERROR(store_.Set(ChallengeKey(t_.rank_), rank_handshake::ToHex(challenge_)));
    return store_.Set(AddressKey(t_.rank_), name);
  }

  // Connects to every higher rank and sends it our hello.
  absl::Status ConnectToHigherRanks() {
    for (int peer = t_.rank_ + 1; peer < t_.size_; ++peer) {
      LOCKSTEP_ASSIGN_OR_RETURN(std::string peer_name, store_.Get(AddressKey(peer), t_.options_.timeout));
      const std::string from = absl::StrCat("rank ", peer, " (shm, @", peer_name, ")");
      sockaddr_un addr;
      if (peer_name.empty() || peer_name.size() > sizeof(addr.sun_path) - 1) {
        return absl::FailedPreconditionError(absl::StrCat("ShmTransport: ", from, " published a bad socket name"));
      }
      Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      if (!fd.valid()) return Errno("ShmTransport: socket");
      const socklen_t addr_len = AbstractAddress(peer_name, &addr);
      if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), addr_len) != 0 && errno != EINPROGRESS) {
        return absl::FailedPreconditionError(absl::StrCat(
            "ShmTransport: rank ", t_.rank_, " cannot reach ", from, ": ", std::strerror(errno),
            ". Shared memory needs every rank on this host and in this network namespace; use TCP between hosts"));
      }
      LOCKSTEP_RETURN_IF_ERROR(CheckPeerUser(fd.get(), from));
      LOCKSTEP_ASSIGN_OR_RETURN(std::string challenge_hex, store_.Get(ChallengeKey(peer), t_.options_.timeout));
      LOCKSTEP_ASSIGN_OR_RETURN(rank_handshake::Nonce challenge, rank_handshake::NonceFromHex(challenge_hex));
      Hello hello = hello_;
      LOCKSTEP_ASSIGN_OR_RETURN(hello.nonce, rank_handshake::RandomNonce());
      if (!secret().empty()) {
        hello.mac = rank_handshake::ConnectMac(secret(), challenge, t_.rank_, peer, t_.size_, hello.nonce);
      }
      sent_nonces_[peer] = hello.nonce;
      LOCKSTEP_RETURN_IF_ERROR(SendHello(fd.get(), hello, MyFds(), deadline_, from));
      t_.peers_[peer].socket = std::move(fd);
    }
    return absl::OkStatus();
  }

  // Accepts every lower rank: its hello and segment, then our reply. The
  // socket's name is visible in /proc/net/unix, so anyone may connect:
  // hellos are read side by side (collectives/transport/hello_acceptor.h),
  // and a connection of another user, one that says nothing in time or one
  // that does not prove the group's secret is dropped and logged while
  // set-up goes on for the real ranks.
  absl::Status AcceptLowerRanks() {
    if (t_.rank_ == 0) return absl::OkStatus();
    HelloAcceptorOptions accepting;
    accepting.per_connection = t_.options_.handshake_timeout;
    accepting.max_fds = 2;
    accepting.listener_name = absl::StrCat("ShmTransport: rank ", t_.rank_, " (@", listener_name_, ")");
    accepting.describe = [](int fd) { return absl::StrCat("a connection from pid ", PeerPid(fd)); };
    accepting.admit = [](int fd) -> absl::Status {
      ucred cred{};
      socklen_t len = sizeof(cred);
      if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return Errno("SO_PEERCRED");
      if (cred.uid == ::geteuid()) return absl::OkStatus();
      return absl::PermissionDeniedError(
          absl::StrCat("it runs as uid ", cred.uid, ", this group as uid ", ::geteuid()));
    };
    HelloAcceptor acceptor(listener_.get(), std::move(accepting), [](absl::string_view) { return sizeof(Hello); });
    for (int accepted = 0; accepted < t_.rank_;) {
      LOCKSTEP_ASSIGN_OR_RETURN(HelloAcceptor::Arrival arrival, acceptor.Next(deadline_));
      const std::string from = absl::StrCat(arrival.name, " to rank ", t_.rank_, " (shm)");
      Hello hello{};
      std::memcpy(&hello, arrival.hello.data(), sizeof(hello));
      const int claimed = hello.rank;
      if (!secret().empty()) {
        const bool plausible = hello.magic == kHelloMagic && hello.version == kVersion && hello.size == t_.size_ &&
                               claimed >= 0 && claimed < t_.rank_;
        if (!plausible ||
            !rank_handshake::MacEqual(hello.mac, rank_handshake::ConnectMac(secret(), challenge_, claimed, t_.rank_,
                                                                            t_.size_, hello.nonce))) {
          acceptor.Drop(arrival, absl::StrCat("it claims rank ", claimed,
                                              " but does not prove the group's secret (wrong token?)"));
          continue;
        }
      } else if (hello.magic != kHelloMagic) {
        acceptor.Drop(arrival, "not a lockstep rank (bad handshake)");
        continue;
      }
      // Authenticated (or no secret): disagreements are real errors.
      LOCKSTEP_RETURN_IF_ERROR(CheckHello(hello, -1, t_.size_, t_.ring_bytes_, from));
      if (arrival.fds.size() != 2) {
        return absl::FailedPreconditionError(
            absl::StrCat("ShmTransport: ", from, " sent no shared segment with its hello; is it a lockstep rank?"));
      }
      const int peer = claimed;
      if (peer >= t_.rank_ || t_.peers_[peer].socket.valid()) {
        return absl::FailedPreconditionError(absl::StrCat("ShmTransport: rank ", peer, " connected to rank ", t_.rank_,
                                                          " unexpectedly (twice, or from above): is RANK=", peer,
                                                          " given to two processes?"));
      }
      Fd fds[2] = {std::move(arrival.fds[0]), std::move(arrival.fds[1])};
      LOCKSTEP_RETURN_IF_ERROR(AdoptSegment(peer, fds, from));
      Hello reply = hello_;
      LOCKSTEP_ASSIGN_OR_RETURN(reply.nonce, rank_handshake::RandomNonce());
      if (!secret().empty()) reply.mac = rank_handshake::AcceptMac(secret(), hello.nonce, t_.rank_, peer, t_.size_);
      LOCKSTEP_RETURN_IF_ERROR(SendHello(arrival.fd.get(), reply, MyFds(), deadline_, from));
      t_.peers_[peer].pid = PeerPid(arrival.fd.get());
      t_.peers_[peer].socket = std::move(arrival.fd);
      ++accepted;
    }
    return absl::OkStatus();
  }

  // The higher ranks' replies to our hello: their segments.
  absl::Status ReadHigherRanksReplies() {
    for (int peer = t_.rank_ + 1; peer < t_.size_; ++peer) {
      Peer& p = t_.peers_[peer];
      p.pid = PeerPid(p.socket.get());
      const std::string from = t_.PeerName(peer);
      Hello hello{};
      Fd fds[2];
      LOCKSTEP_RETURN_IF_ERROR(RecvHello(p.socket.get(), &hello, fds, deadline_, from));
      LOCKSTEP_RETURN_IF_ERROR(CheckHello(hello, peer, t_.size_, t_.ring_bytes_, from));
      if (!secret().empty() &&
          !rank_handshake::MacEqual(
              hello.mac, rank_handshake::AcceptMac(secret(), sent_nonces_[peer], peer, t_.rank_, t_.size_))) {
        return absl::PermissionDeniedError(
            absl::StrCat("ShmTransport: whatever answered as ", from,
                         " does not know the group's secret: the ranks were "
                         "started with different LOCKSTEP_STORE_TOKENs, or another process answered at that socket"));
      }
      LOCKSTEP_RETURN_IF_ERROR(AdoptSegment(peer, fds, from));
    }
    return absl::OkStatus();
  }

  // Maps a peer's segment (checked: size, seals, header) and keeps its doorbell.
  absl::Status AdoptSegment(int peer, Fd (&fds)[2], const std::string& from) {
    struct stat st {};
    if (::fstat(fds[0].get(), &st) != 0) return Errno("ShmTransport: fstat");
    const int seals = ::fcntl(fds[0].get(), F_GET_SEALS);
    if (static_cast<size_t>(st.st_size) != segment_bytes_ || seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
      return absl::FailedPreconditionError(absl::StrCat("ShmTransport: ", from, " sent a segment of ", st.st_size,
                                                        " bytes (seals ", seals, "), expected a sealed one of ",
                                                        segment_bytes_, " bytes"));
    }
    void* p = ::mmap(nullptr, segment_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0].get(), 0);
    if (p == MAP_FAILED) return Errno(absl::StrCat("ShmTransport: mapping the segment of ", from));
    t_.segments_[peer] = {p, segment_bytes_};
    const Control* c = t_.ControlOf(peer);
    if (c->magic != kSegmentMagic || c->rank != peer || c->size != t_.size_ || c->ring_bytes != t_.ring_bytes_) {
      return absl::FailedPreconditionError(
          absl::StrCat("ShmTransport: the segment of ", from, " does not belong to rank ", peer, " of this group"));
    }
    t_.peers_[peer].doorbell = std::move(fds[1]);
    return absl::OkStatus();
  }

  // Last step: each rank tries to read every peer's probe word with
  // process_vm_readv and tells the peer over its socket (one byte) whether
  // it may send it single-copy messages.
  absl::Status AgreeOnSingleCopy() {
    // verdict[peer] is 1 when the peer may send us single-copy messages.
    std::vector<char> verdict(static_cast<size_t>(t_.size_), 0);
    for (int peer = 0; peer < t_.size_; ++peer) {
      if (peer != t_.rank_) verdict[peer] = CanRead(peer);
    }
    for (int peer = 0; peer < t_.size_; ++peer) {
      if (peer != t_.rank_) LOCKSTEP_RETURN_IF_ERROR(SendVerdict(peer, verdict[peer]));
    }
    for (int peer = 0; peer < t_.size_; ++peer) {
      if (peer == t_.rank_) continue;
      LOCKSTEP_ASSIGN_OR_RETURN(const char b, ReceiveVerdict(peer));
      if (t_.options_.single_copy_bytes != 0 && b == 1) {
        t_.single_copy_to_[peer] = 1;
      } else if (t_.single_copy_refused_[peer].empty()) {
        t_.single_copy_refused_[peer] =
            absl::StrCat(t_.PeerName(peer), " cannot read this rank's memory or has single copy off");
      }
    }
    return absl::OkStatus();
  }

  // Whether this rank can read `peer`'s probe word (else why not, in
  // single_copy_refused_).
  bool CanRead(int peer) {
    if (t_.options_.single_copy_bytes == 0) {
      t_.single_copy_refused_[peer] = "single copy off";
      return false;
    }
    const Control* c = t_.ControlOf(peer);
    uint64_t word = 0;
    const int err = shm_internal::ReadRemote(t_.peers_[peer].pid, c->probe_address, &word, sizeof(word));
    if (err != 0) {
      // EPERM (ptrace restrictions), ESRCH (another pid namespace): the ring.
      t_.single_copy_refused_[peer] =
          absl::StrCat("process_vm_readv from ", t_.PeerName(peer), ": ", std::strerror(err));
      return false;
    }
    if (word != c->probe_value) {
      t_.single_copy_refused_[peer] = absl::StrCat("process_vm_readv from ", t_.PeerName(peer),
                                                   " read another process's memory (pid namespaces differ?)");
      return false;
    }
    return true;
  }

  absl::Status SendVerdict(int peer, char b) {
    const int fd = t_.peers_[peer].socket.get();
    while (true) {
      const ssize_t n = ::send(fd, &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n == 1) return absl::OkStatus();
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!AwaitFd(fd, POLLOUT, deadline_)) {
          return absl::DeadlineExceededError(
              absl::StrCat("ShmTransport: timed out telling ", t_.PeerName(peer), " whether single copy works"));
        }
        continue;
      }
      return Errno(absl::StrCat("ShmTransport: telling ", t_.PeerName(peer), " whether single copy works"));
    }
  }

  absl::StatusOr<char> ReceiveVerdict(int peer) {
    const int fd = t_.peers_[peer].socket.get();
    while (true) {
      char b = 0;
      const ssize_t n = ::recv(fd, &b, 1, MSG_DONTWAIT);
      if (n == 1) return b;
      if (n == 0) {
        return absl::UnavailableError(
            absl::StrCat("ShmTransport: ", t_.PeerName(peer), " closed the connection during set-up"));
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        return Errno(absl::StrCat("ShmTransport: learning from ", t_.PeerName(peer), " whether single copy works"));
      }
      if (!AwaitFd(fd, POLLIN, deadline_)) {
        return absl::DeadlineExceededError(absl::StrCat("ShmTransport: timed out waiting for ", t_.PeerName(peer),
                                                        " to say whether single copy works"));
      }
    }
  }

  const int (&MyFds())[2] {
    my_fds_[0] = memfd_.get();
    my_fds_[1] = t_.doorbell_.get();
    return my_fds_;
  }

  const std::string& secret() const { return t_.options_.secret; }

  ShmTransport& t_;
  Store& store_;
  const Deadline deadline_;
  const size_t segment_bytes_;
  const Hello hello_;
  rank_handshake::Nonce challenge_{};
  std::vector<rank_handshake::Nonce> sent_nonces_ = std::vector<rank_handshake::Nonce>(static_cast<size_t>(t_.size_));
  Fd memfd_;
  Fd listener_;
  std::string listener_name_;
  int my_fds_[2] = {-1, -1};
};

absl::Status ValidateShmTransportOptions(const ShmTransportOptions& options) {
  if (options.timeout <= Milliseconds(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShmTransportOptions.timeout is ", options.timeout.count(), " ms; it must be positive"));
  }
  if (options.handshake_timeout <= Milliseconds(0)) {
    return absl::InvalidArgumentError(absl::StrCat("ShmTransportOptions.handshake_timeout is ",
                                                   options.handshake_timeout.count(), " ms; it must be positive"));
  }
  if (options.slot_bytes < (4u << 10) || options.slot_bytes > (16u << 20) || options.slot_bytes % kLine != 0) {
    return absl::InvalidArgumentError(absl::StrCat("ShmTransportOptions.slot_bytes is ", options.slot_bytes,
                                                   "; it must be a multiple of 64 in [4096, 16777216]"));
  }
  if (options.slots < 2 || options.slots > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShmTransportOptions.slots is ", options.slots, "; it must be in [2, 1024]"));
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
  if (options.pause_microseconds < -1 || options.pause_microseconds > 1000000) {
    return absl::InvalidArgumentError(absl::StrCat("ShmTransportOptions.pause_microseconds is ",
                                                   options.pause_microseconds,
                                                   "; it must be in [-1, 1000000] (-1: chosen by the CPUs)"));
  }
  if (options.spin_microseconds < 0 || options.spin_microseconds > 1000000) {
    return absl::InvalidArgumentError(absl::StrCat("ShmTransportOptions.spin_microseconds is ",
                                                   options.spin_microseconds, "; it must be in [0, 1000000]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ShmTransport>> ShmTransport::Create(Store& store, int rank, int size,
                                                                   const ShmTransportOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("ShmTransport: rank ", rank, " is not in [0, ", size, ")"));
  }
  LOCKSTEP_RETURN_IF_ERROR(ValidateShmTransportOptions(options));
  std::unique_ptr<ShmTransport> t(new ShmTransport(rank, size, options));
  if (size == 1) return t;
  LOCKSTEP_RETURN_IF_ERROR(Setup(*t, store).Run());
  return t;
}

}  // namespace lockstep
