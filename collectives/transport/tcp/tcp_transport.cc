#include "collectives/transport/tcp/tcp_transport.h"

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/transport/hello_acceptor.h"
#include "collectives/transport/message_header.h"
#include "collectives/transport/tcp/rank_handshake.h"
#include "collectives/transport/transfer_streams.h"
#include "collectives/transport/transport_errors.h"
#include "core/status.h"

namespace lockstep {
namespace {

constexpr uint32_t kHelloMagic = rank_handshake::kMagic;
// 2: one connection per direction, 64-byte message headers.
// 3: authenticated handshake (collectives/transport/tcp/rank_handshake.h).
constexpr uint32_t kTransportVersion = rank_handshake::kVersion;
// A message with this tag carries the reason its sender aborted.
constexpr uint32_t kAbortTag = 0xFFFFFFFEu;
constexpr uint64_t kMaxAbortReason = 4096;

std::string AddressKey(int rank) { return absl::StrCat("tcp_transport/", rank); }
std::string ChallengeKey(int rank) { return absl::StrCat("tcp_transport/", rank, "/challenge"); }
std::string ClaimKey(int rank) { return absl::StrCat("tcp_transport/", rank, "/claims"); }
constexpr char kDuplicateKey[] = "tcp_transport/duplicate_rank";

absl::Status CheckHello(const rank_handshake::HelloPrefix& h, int expected_size, absl::string_view from) {
  if (h.magic != kHelloMagic) {
    return absl::FailedPreconditionError(
        absl::StrCat("TcpTransport: ", from, " is not a lockstep rank (bad handshake)"));
  }
  if (h.version != kTransportVersion) {
    return absl::FailedPreconditionError(absl::StrCat("TcpTransport: ", from, " speaks protocol ", h.version,
                                                      ", this rank ", kTransportVersion, "; use one lockstep build"));
  }
  if (h.size != expected_size || h.rank < 0 || h.rank >= expected_size) {
    return absl::FailedPreconditionError(absl::StrCat("TcpTransport: ", from, " says rank ", h.rank, " of ", h.size,
                                                      ", this group has ", expected_size,
                                                      " ranks; are two jobs sharing a store prefix?"));
  }
  return absl::OkStatus();
}

// A wait for the other ranks' addresses failed: if a RANK was given to two
// processes (so one rank is missing), that is the error to report.
absl::Status NameDuplicate(Store& store, const absl::Status& waited) {
  absl::StatusOr<bool> duplicate = store.Check({kDuplicateKey});
  if (duplicate.ok() && *duplicate) {
    absl::StatusOr<std::string> which = store.Get(kDuplicateKey, Milliseconds(1000));
    return absl::FailedPreconditionError(
        absl::StrCat("TcpTransport: a rank never arrived because RANK ", which.ok() ? *which : "?",
                     " was given to two processes (so one rank is missing): every process needs its own RANK"));
  }
  return waited;
}

size_t IovBytes(const iovec* iov, int n) {
  size_t total = 0;
  for (int k = 0; k < n; ++k) total += iov[k].iov_len;
  return total;
}

// Progress of one transfer inside Exchange.
// Pieces handed to `consume` start at multiples of this (but the last), so
// that a reduction finds whole, aligned elements where they lie: a piece
// that split an element would send the ring's reduction through a staging
// copy.
constexpr size_t kConsumeAlign = 64;

struct Progress {
  MessageHeader header{};
  size_t header_done = 0;
  size_t done = 0;
  size_t reported = 0;  // Bytes already passed to on_segment.
  bool complete = false;
  // Receives with `consume`: bytes handed over so far, and the received
  // bytes after them (fewer than kConsumeAlign) that wait for the next read.
  size_t consumed = 0;
  size_t carried = 0;
  char carry[kConsumeAlign];
};

}  // namespace

absl::Status ValidateTcpTransportOptions(const TcpTransportOptions& options) {
  if (options.host.empty()) {
    return absl::InvalidArgumentError(
        "TcpTransportOptions.host is empty; give the address the other ranks reach this "
        "one at (127.0.0.1 for one machine)");
  }
  if (options.timeout <= Milliseconds(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("TcpTransportOptions.timeout is ", options.timeout.count(), " ms; it must be positive"));
  }
  if (options.socket_buffer_bytes < 0 || options.socket_buffer_bytes > (1 << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("TcpTransportOptions.socket_buffer_bytes is ",
                                                   options.socket_buffer_bytes,
                                                   "; it must be in [0, 2^30] (0: the kernel's autotuning)"));
  }
  if (options.connect_timeout <= Milliseconds(0) || options.handshake_timeout <= Milliseconds(0)) {
    return absl::InvalidArgumentError("TcpTransportOptions.connect_timeout and handshake_timeout must be positive");
  }
  if (options.spin_microseconds < 0 || options.spin_microseconds > 1000000) {
    return absl::InvalidArgumentError(absl::StrCat("TcpTransportOptions.spin_microseconds is ",
                                                   options.spin_microseconds, "; it must be in [0, 1000000]"));
  }
  for (char c : options.congestion_control) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') {
      return absl::InvalidArgumentError(absl::StrCat("TcpTransportOptions.congestion_control '",
                                                     options.congestion_control,
                                                     "' is not a congestion control name (cubic, reno, bbr, ...)"));
    }
  }
  return absl::OkStatus();
}

// How two ranks make sure of each other (rank_handshake.h), in both
// directions: inside Create for the full mesh, or when an exchange first
// needs the connection.
struct TcpTransport::Handshake {
  using Hello = rank_handshake::Hello;
  using HelloPrefix = rank_handshake::HelloPrefix;

  static std::unique_ptr<HelloAcceptor> MakeAcceptor(TcpTransport& t) {
    HelloAcceptorOptions accepting;
    accepting.per_connection = t.options_.handshake_timeout;
    accepting.listener_name = absl::StrCat("TcpTransport: rank ", t.rank_, " (", t.address_, ")");
    accepting.describe = [](int fd) { return absl::StrCat("a connection from ", PeerAddress(fd)); };
    return std::make_unique<HelloAcceptor>(t.listener_.get(), std::move(accepting), [](absl::string_view got) {
      if (got.size() < sizeof(HelloPrefix)) return sizeof(HelloPrefix);
      HelloPrefix prefix;
      std::memcpy(&prefix, got.data(), sizeof(prefix));
      // Another protocol's hello may be shorter: its prefix names it.
      if (prefix.magic != kHelloMagic || prefix.version != kTransportVersion) return got.size();
      return sizeof(Hello);
    });
  }

  // What this rank says first on a connection it makes to `peer`, whose
  // published challenge is `challenge`.
  static Hello ConnectHello(const TcpTransport& t, int peer, const rank_handshake::Nonce& challenge,
                            const rank_handshake::Nonce& nonce) {
    Hello hello{{kHelloMagic, kTransportVersion, t.rank_, t.size_}, nonce, {}};
    if (!t.options_.secret.empty()) {
      hello.mac = rank_handshake::ConnectMac(t.options_.secret, challenge, t.rank_, peer, t.size_, nonce);
    }
    return hello;
  }

  // Our send connection to `peer`: connect, then our hello (its answer is
  // read by ReadAnswer or AwaitAnswer).
  static absl::Status Connect(TcpTransport& t, int peer, Deadline deadline) {
    if (t.aborted_) {
      return absl::FailedPreconditionError("TcpTransport: aborted after an earlier error; create a new communicator");
    }
    Peer& p = t.peers_[peer];
    if (p.address.empty()) LOCKSTEP_RETURN_IF_ERROR(Lookup(t, peer, deadline));
    std::string host;
    int port = 0;
    LOCKSTEP_RETURN_IF_ERROR(SplitHostPort(p.address, &host, &port));
    absl::StatusOr<Fd> fd =
        rank_handshake::ConnectToPeer(host, port, t.rank_, peer, t.options_.connect_timeout, deadline);
    if (!fd.ok()) {
      if (t.options_.full_mesh || !absl::IsUnavailable(fd.status())) return fd.status();
      // On demand, the peer's listener may be gone because the peer is.
      return absl::UnavailableError(absl::StrCat(fd.status().message(), ". Or rank ", peer,
                                                 " has already exited or aborted (ranks connect when they first "
                                                 "send to each other): see its log"));
    }
    TuneSocket(fd->get(), t.options_.socket_buffer_bytes, t.options_.congestion_control);
    LOCKSTEP_ASSIGN_OR_RETURN(p.sent_nonce, rank_handshake::RandomNonce());
    const Hello hello = ConnectHello(t, peer, p.challenge, p.sent_nonce);
    LOCKSTEP_RETURN_IF_ERROR(SendAll(fd->get(), &hello, sizeof(hello), deadline, t.PeerName(peer)));
    {
      std::lock_guard<std::mutex> lock(t.links_mu_);
      p.send_fd = std::move(*fd);
    }
    p.send = Peer::Link::kAnswering;
    p.answer_got = 0;
    return absl::OkStatus();
  }

  // `peer`'s address and challenge from the store (connections on demand,
  // with the store kept): waits for them until the exchange's deadline or
  // the set-up timeout, whichever comes first.
  static absl::Status Lookup(TcpTransport& t, int peer, Deadline deadline) {
    const auto left = std::chrono::duration_cast<Milliseconds>(deadline - SteadyClock::now());
    const Milliseconds wait = std::max(Milliseconds(1), std::min(t.options_.timeout, left));
    absl::StatusOr<std::vector<std::string>> got = t.store_->MultiGet({AddressKey(peer), ChallengeKey(peer)}, wait);
    if (!got.ok()) {
      absl::Status named = NameDuplicate(*t.store_, got.status());
      if (!absl::IsFailedPrecondition(named)) {
        named = absl::Status(
            got.status().code(),
            absl::StrCat("TcpTransport: rank ", t.rank_, " found no address of rank ", peer, " in the store within ",
                         wait.count(), " ms: rank ", peer,
                         " has not started, or failed before it joined (see its log); ", got.status().message()));
      }
      return named;
    }
    LOCKSTEP_ASSIGN_OR_RETURN(rank_handshake::Nonce challenge, rank_handshake::NonceFromHex((*got)[1]));
    std::string host;
    int port = 0;
    LOCKSTEP_RETURN_IF_ERROR(SplitHostPort((*got)[0], &host, &port));
    std::lock_guard<std::mutex> lock(t.links_mu_);
    t.peers_[peer].address = (*got)[0];
    t.peers_[peer].challenge = challenge;
    return absl::OkStatus();
  }

  // Reads what has come of `peer`'s answer; true once it came and checked.
  static absl::StatusOr<bool> ReadAnswer(TcpTransport& t, int peer) {
    Peer& p = t.peers_[peer];
    while (p.answer_got < sizeof(Hello)) {
      const ssize_t n =
          ::recv(p.send_fd.get(), p.answer.data() + p.answer_got, sizeof(Hello) - p.answer_got, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
      if (n <= 0) {
        return absl::UnavailableError(
            absl::StrCat("TcpTransport: ", t.PeerName(peer), " closed rank ", t.rank_,
                         "'s connection before answering its handshake",
                         n < 0 ? absl::StrCat(" (", std::strerror(errno), ")") : std::string(),
                         ": it did not accept this rank's proof of the group's secret (were the ranks started with "
                         "different LOCKSTEP_STORE_TOKENs?), or it exited or aborted; see its log"));
      }
      p.answer_got += static_cast<size_t>(n);
    }
    Hello answer;
    std::memcpy(&answer, p.answer.data(), sizeof(answer));
    LOCKSTEP_RETURN_IF_ERROR(CheckAnswer(t, peer, answer));
    p.send = Peer::Link::kReady;
    return true;
  }

  // A receive waiting for `peer` to connect: whether our (answered)
  // connection to it is still open. The peer never writes on it, so
  // readable means closed.
  static absl::Status CheckAlive(TcpTransport& t, int peer, const MessageTag& tag) {
    char byte;
    const ssize_t n = ::recv(t.peers_[peer].send_fd.get(), &byte, 1, MSG_DONTWAIT | MSG_PEEK);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      return absl::UnavailableError(
          absl::StrCat(t.PeerName(peer), " closed its connection with rank ", t.rank_, " before sending op #", tag.seq,
                       n < 0 ? absl::StrCat(" (", std::strerror(errno), ")") : std::string(),
                       ": it exited, crashed or aborted after an error of its own; see its log"));
    }
    return absl::OkStatus();
  }

  static absl::Status AwaitAnswer(TcpTransport& t, int peer, Deadline deadline) {
    Hello answer{};
    LOCKSTEP_RETURN_IF_ERROR(
        RecvAll(t.peers_[peer].send_fd.get(), &answer, sizeof(answer), deadline, t.PeerName(peer)));
    LOCKSTEP_RETURN_IF_ERROR(CheckAnswer(t, peer, answer));
    t.peers_[peer].send = Peer::Link::kReady;
    return absl::OkStatus();
  }

  // The send connection must have reached the rank we meant, and that rank
  // must prove it knows the secret.
  static absl::Status CheckAnswer(const TcpTransport& t, int peer, const Hello& answer) {
    const Peer& p = t.peers_[peer];
    LOCKSTEP_RETURN_IF_ERROR(CheckHello(answer.prefix, t.size_, t.PeerName(peer)));
    if (answer.prefix.rank != peer) {
      return absl::FailedPreconditionError(absl::StrCat("TcpTransport: ", p.address, " answered as rank ",
                                                        answer.prefix.rank, ", expected rank ", peer));
    }
    if (!t.options_.secret.empty() &&
        !rank_handshake::MacEqual(answer.mac,
                                  rank_handshake::AcceptMac(t.options_.secret, p.sent_nonce, peer, t.rank_, t.size_))) {
      return absl::PermissionDeniedError(absl::StrCat(
          "TcpTransport: whatever answered at ", p.address, " as rank ", peer,
          " does not know the group's secret: another process holds that address, or the ranks were started with "
          "different LOCKSTEP_STORE_TOKENs"));
    }
    return absl::OkStatus();
  }

  // Whatever the acceptor has completed, without blocking; true if a rank's
  // connection was kept.
  static absl::StatusOr<bool> TryAccept(TcpTransport& t, Deadline deadline) {
    bool kept_any = false;
    while (t.Accepting()) {
      std::optional<HelloAcceptor::Arrival> arrival = t.acceptor_->TryNext();
      if (!arrival) break;
      bool kept = false;
      LOCKSTEP_RETURN_IF_ERROR(Admit(t, *arrival, deadline, &kept));
      kept_any |= kept;
    }
    return kept_any;
  }

  // A connection that does not prove itself (not a lockstep rank, a wrong
  // MAC) is dropped and the wait goes on for the real rank: a stray or
  // hostile process can neither take a rank's place nor stop or delay the
  // ranks (collectives/transport/hello_acceptor.h). Once every peer has
  // connected, the listener closes.
  static absl::Status Admit(TcpTransport& t, HelloAcceptor::Arrival& arrival, Deadline deadline, bool* kept) {
    *kept = false;
    const std::string& secret = t.options_.secret;
    const std::string name = absl::StrCat(arrival.name, " to rank ", t.rank_, " (", t.address_, ")");
    Hello hello{};
    std::memcpy(&hello, arrival.hello.data(), std::min(arrival.hello.size(), sizeof(hello)));
    if (hello.prefix.magic != kHelloMagic) {
      if (!secret.empty()) {
        t.acceptor_->Drop(arrival, "not a lockstep rank (bad handshake)");
        return absl::OkStatus();
      }
      return absl::FailedPreconditionError(
          absl::StrCat("TcpTransport: ", name, " is not a lockstep rank (bad handshake)"));
    }
    if (hello.prefix.version != kTransportVersion) {
      // An older format cannot be authenticated: with a secret it is just
      // dropped; without one it must be a rank of another build.
      if (!secret.empty()) {
        t.acceptor_->Drop(arrival, absl::StrCat("protocol version ", hello.prefix.version));
        return absl::OkStatus();
      }
      LOCKSTEP_RETURN_IF_ERROR(CheckHello(hello.prefix, t.size_, name));
    }
    const int claimed = hello.prefix.rank;
    if (!secret.empty()) {
      const bool plausible = claimed >= 0 && claimed < t.size_ && hello.prefix.size == t.size_;
      if (!plausible ||
          !rank_handshake::MacEqual(
              hello.mac, rank_handshake::ConnectMac(secret, t.challenge_, claimed, t.rank_, t.size_, hello.nonce))) {
        t.acceptor_->Drop(
            arrival, absl::StrCat("it claims rank ", claimed, " but does not prove the group's secret (wrong token?)"));
        return absl::OkStatus();
      }
    }
    // Authenticated (or no secret): disagreements are real errors.
    LOCKSTEP_RETURN_IF_ERROR(CheckHello(hello.prefix, t.size_, name));
    if (claimed == t.rank_ || t.peers_[claimed].recv_fd.valid()) {
      return absl::FailedPreconditionError(absl::StrCat("TcpTransport: rank ", claimed, " connected to rank ", t.rank_,
                                                        " unexpectedly (twice, or itself): is RANK=", claimed,
                                                        " given to two processes?"));
    }
    Fd fd = std::move(arrival.fd);
    TuneSocket(fd.get(), t.options_.socket_buffer_bytes, t.options_.congestion_control);
    LOCKSTEP_ASSIGN_OR_RETURN(rank_handshake::Nonce reply_nonce, rank_handshake::RandomNonce());
    Hello reply{{kHelloMagic, kTransportVersion, t.rank_, t.size_}, reply_nonce, {}};
    if (!secret.empty()) reply.mac = rank_handshake::AcceptMac(secret, hello.nonce, t.rank_, claimed, t.size_);
    LOCKSTEP_RETURN_IF_ERROR(SendAll(fd.get(), &reply, sizeof(reply), deadline, name));
    std::lock_guard<std::mutex> lock(t.links_mu_);
    t.peers_[claimed].recv_fd = std::move(fd);
    *kept = true;
    if (++t.accepted_ == t.size_ - 1) {
      t.acceptor_.reset();
      t.listener_.Reset();
    }
    return absl::OkStatus();
  }
};

absl::StatusOr<std::unique_ptr<TcpTransport>> TcpTransport::Create(Store& store, int rank, int size,
                                                                   const TcpTransportOptions& options) {
  return CreateWith(store, nullptr, rank, size, options);
}

absl::StatusOr<std::unique_ptr<TcpTransport>> TcpTransport::Create(std::shared_ptr<Store> store, int rank, int size,
                                                                   const TcpTransportOptions& options) {
  if (store == nullptr) return absl::InvalidArgumentError("TcpTransport::Create: no store");
  Store& s = *store;
  return CreateWith(s, std::move(store), rank, size, options);
}

absl::StatusOr<std::unique_ptr<TcpTransport>> TcpTransport::CreateWith(Store& store, std::shared_ptr<Store> keep,
                                                                       int rank, int size,
                                                                       const TcpTransportOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("TcpTransport: rank ", rank, " is not in [0, ", size, ")"));
  }
  LOCKSTEP_RETURN_IF_ERROR(ValidateTcpTransportOptions(options));
  std::unique_ptr<TcpTransport> t(new TcpTransport(rank, size, options));
  if (size == 1) return t;
  const Deadline deadline = DeadlineIn(options.timeout);
  int port = 0;
  // Only on the configured address: nothing else on the host's other
  // interfaces can reach the listener.
  LOCKSTEP_ASSIGN_OR_RETURN(Fd listener, Listen(options.host, 0, &port));
  LOCKSTEP_RETURN_IF_ERROR(SetNonBlocking(listener.get()));
  const std::string my_address = HostPort(options.host, port);
  // A fresh challenge for this rendezvous, before the address: a connector
  // proves it read it (no replay of an older connection).
  LOCKSTEP_ASSIGN_OR_RETURN(rank_handshake::Nonce challenge, rank_handshake::RandomNonce());
  // Two processes given the same RANK: the second to claim it says so at
  // once and leaves a note, so the others' wait for the rank that is then
  // missing names the real cause.
  LOCKSTEP_ASSIGN_OR_RETURN(int64_t claims, store.Add(ClaimKey(rank), 1));
  if (claims != 1) {
    (void)store.Set(kDuplicateKey, absl::StrCat(rank));
    return absl::FailedPreconditionError(absl::StrCat(
        "TcpTransport: RANK ", rank,
        " is claimed by another process of this group too: every process needs its "
        "own RANK (check the launcher's settings or the RANK/OMPI_COMM_WORLD_RANK/SLURM_PROCID variables)"));
  }
  LOCKSTEP_RETURN_IF_ERROR(store.Set(ChallengeKey(rank), rank_handshake::ToHex(challenge)));
  LOCKSTEP_RETURN_IF_ERROR(store.Set(AddressKey(rank), my_address));

  t->address_ = my_address;
  t->challenge_ = challenge;
  if (keep != nullptr && !options.full_mesh) {
    // Each peer's address when this rank first connects to it.
    t->store_ = std::move(keep);
    t->listener_ = std::move(listener);
    t->acceptor_ = Handshake::MakeAcceptor(*t);
    return t;
  }
  // Every peer's address and challenge in one round trip (Store::MultiGet);
  // it also waits until every rank has arrived.
  std::vector<std::string> keys;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    keys.push_back(AddressKey(peer));
    keys.push_back(ChallengeKey(peer));
  }
  absl::StatusOr<std::vector<std::string>> published = store.MultiGet(keys, options.timeout);
  if (!published.ok()) return NameDuplicate(store, published.status());
  size_t next = 0;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    Peer& p = t->peers_[peer];
    p.address = (*published)[next++];
    LOCKSTEP_ASSIGN_OR_RETURN(p.challenge, rank_handshake::NonceFromHex((*published)[next++]));
    std::string host;
    int peer_port = 0;
    LOCKSTEP_RETURN_IF_ERROR(SplitHostPort(p.address, &host, &peer_port));
  }
  t->listener_ = std::move(listener);
  t->acceptor_ = Handshake::MakeAcceptor(*t);
  if (!options.full_mesh) return t;

  // The full mesh, now: connect to every other rank (our send direction)
  // and introduce ourselves; their answers are read after accepting, so no
  // rank waits on another's accept loop while that one waits on it.
  for (int peer = 0; peer < size; ++peer) {
    if (peer != rank) LOCKSTEP_RETURN_IF_ERROR(Handshake::Connect(*t, peer, deadline));
  }
  // Every other rank's send connection (our receive direction), in
  // whatever order they arrive, their hellos read side by side.
  while (t->Accepting()) {
    LOCKSTEP_ASSIGN_OR_RETURN(HelloAcceptor::Arrival arrival, t->acceptor_->Next(deadline));
    bool kept = false;
    LOCKSTEP_RETURN_IF_ERROR(Handshake::Admit(*t, arrival, deadline, &kept));
  }
  for (int peer = 0; peer < size; ++peer) {
    if (peer != rank) LOCKSTEP_RETURN_IF_ERROR(Handshake::AwaitAnswer(*t, peer, deadline));
  }
  return t;
}

TcpTransport::TcpTransport(int rank, int size, const TcpTransportOptions& options)
    : rank_(rank), size_(size), options_(options), peers_(static_cast<size_t>(size)), traffic_(size) {}

TcpTransport::~TcpTransport() = default;

std::string TcpTransport::PeerName(int peer) const {
  if (peer < 0 || peer >= size_ || peers_[peer].address.empty()) return absl::StrCat("rank ", peer);
  return absl::StrCat("rank ", peer, " (", peers_[peer].address, ")");
}

void TcpTransport::Abort(absl::string_view reason) {
  aborted_ = true;
  const std::string text(reason.substr(0, kMaxAbortReason));
  // Best effort, never blocking: a peer that is reading headers learns why.
  auto tell = [&text](int fd, const void* hello, size_t hello_bytes) {
    MessageHeader h = MakeMessageHeader(MessageTag{~uint64_t{0}, kAbortTag, 0}, text.size());
    iovec iov[3] = {
        {const_cast<void*>(hello), hello_bytes}, {&h, sizeof(h)}, {const_cast<char*>(text.data()), text.size()}};
    msghdr msg{};
    msg.msg_iov = hello_bytes > 0 ? iov : iov + 1;
    msg.msg_iovlen = hello_bytes > 0 ? 3 : 2;
    (void)::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  };
  // A peer this rank never sent to may be waiting for its first message:
  // it gets a connection now, with the hello and the reason in one go
  // (within a quarter of a second for all of them together). Addresses not
  // read yet are read now, all in one request, if the store answers in time.
  const Deadline until = DeadlineIn(std::chrono::milliseconds(250));
  std::vector<int> unknown;
  {
    std::lock_guard<std::mutex> lock(links_mu_);
    for (int peer = 0; peer < size_; ++peer) {
      if (peer != rank_ && !peers_[peer].send_fd.valid() && peers_[peer].address.empty()) unknown.push_back(peer);
    }
  }
  std::vector<std::string> looked_up(size_);
  std::vector<rank_handshake::Nonce> looked_up_challenge(size_);
  if (store_ != nullptr && !unknown.empty()) {
    std::vector<std::string> keys;
    for (int peer : unknown) {
      keys.push_back(AddressKey(peer));
      keys.push_back(ChallengeKey(peer));
    }
    absl::StatusOr<std::vector<std::string>> got = store_->MultiGet(keys, Milliseconds(200));
    for (size_t i = 0; got.ok() && i < unknown.size(); ++i) {
      absl::StatusOr<rank_handshake::Nonce> challenge = rank_handshake::NonceFromHex((*got)[2 * i + 1]);
      if (!challenge.ok()) continue;
      looked_up[unknown[i]] = (*got)[2 * i];
      looked_up_challenge[unknown[i]] = *challenge;
    }
  }
  std::lock_guard<std::mutex> lock(links_mu_);
  for (int peer = 0; peer < size_; ++peer) {
    Peer& p = peers_[peer];
    if (peer == rank_) continue;
    const std::string& address = p.address.empty() ? looked_up[peer] : p.address;
    const rank_handshake::Nonce& challenge = p.address.empty() ? looked_up_challenge[peer] : p.challenge;
    if (p.send_fd.valid()) {
      tell(p.send_fd.get(), nullptr, 0);
      ::shutdown(p.send_fd.get(), SHUT_RDWR);
    } else if (!address.empty() && SteadyClock::now() < until) {
      std::string host;
      int port = 0;
      int error = 0;
      absl::StatusOr<rank_handshake::Nonce> nonce = rank_handshake::RandomNonce();
      if (!SplitHostPort(address, &host, &port).ok() || !nonce.ok()) continue;
      absl::StatusOr<Fd> fd = ConnectOnce(host, port, until, &error);
      if (!fd.ok()) continue;
      const rank_handshake::Hello hello = Handshake::ConnectHello(*this, peer, challenge, *nonce);
      tell(fd->get(), &hello, sizeof(hello));
      abort_fds_.push_back(std::move(*fd));  // Open until the transport goes: a close could reset it unread.
    }
    if (p.recv_fd.valid()) ::shutdown(p.recv_fd.get(), SHUT_RDWR);
  }
  // Peers about to connect are refused at once.
  if (listener_.valid()) ::shutdown(listener_.get(), SHUT_RDWR);
}

TrafficCounters TcpTransport::Traffic() const { return traffic_.Snapshot(); }

absl::Status TcpTransport::Exchange(absl::Span<Transfer> transfers, MessageTag tag, Deadline deadline) {
  return Run(transfers, tag, deadline, nullptr);
}

absl::Status TcpTransport::ExchangeOpen(TransferFeed& feed, Deadline deadline) {
  return Run({}, MessageTag{}, deadline, &feed);
}

// One Exchange or ExchangeOpen. Run() goes round the streams (one per peer
// and direction, collectives/transport/transfer_streams.h), giving each
// stream whose socket may progress one sendmsg or recvmsg; when nothing
// moved it waits in poll() for a socket (Wait).
class TcpTransport::Op {
 public:
  Op(TcpTransport& transport, absl::Span<Transfer> initial, MessageTag tag, Deadline deadline, TransferFeed* feed)
      : tr_(transport),
        streams_(initial, transport.rank_, transport.size_, "TcpTransport"),
        tag_(tag),
        deadline_(deadline),
        feed_(feed),
        may_progress_(streams_.current.size(), true) {}

  absl::Status Run() {
    LOCKSTEP_RETURN_IF_ERROR(streams_.Start(feed_));
    RestartSpin();
    while (true) {
      if (streams_.remaining == 0) {
        // Done, unless the feed has more.
        const size_t before = streams_.total;
        LOCKSTEP_RETURN_IF_ERROR(streams_.PollFeed(feed_));
        if (streams_.total == before) break;
      }
      bool moved = false;
      if (may_accept_ && tr_.Accepting()) {
        // Peers connecting to us, whether or not this exchange receives from
        // them (one that sends to us waits for our answer).
        may_accept_ = false;
        LOCKSTEP_ASSIGN_OR_RETURN(const bool kept, Handshake::TryAccept(tr_, deadline_));
        if (kept) {
          moved = true;
          std::fill(may_progress_.begin(), may_progress_.end(), true);
        }
      }
      for (size_t stream = 0; stream < streams_.current.size(); ++stream) {
        if (streams_.current[stream] == kNone || !may_progress_[stream]) continue;
        LOCKSTEP_RETURN_IF_ERROR(Step(stream, &moved));
      }
      if (feed_ != nullptr) {
        const size_t before = streams_.total;
        LOCKSTEP_RETURN_IF_ERROR(streams_.PollFeed(feed_));
        moved |= streams_.total != before;
      }
      if (streams_.remaining == 0) continue;  // The top of the loop asks the feed once more.
      if (moved) {
        RestartSpin();
        continue;
      }
      // Only receives that are no longer needed wait: done.
      if (feed_ != nullptr && streams_.OnlyDroppableLeft([](const Progress& p) { return p.header_done > 0; })) {
        return absl::OkStatus();
      }
      LOCKSTEP_ASSIGN_OR_RETURN(const bool in_time, Wait());
      if (!in_time) break;
    }
    if (streams_.remaining == 0) return absl::OkStatus();
    const uint64_t seq = streams_.total > 0 ? TagOf(streams_.at(0)).seq : tag_.seq;
    return ExchangeTimeoutError(seq, tr_.rank_, streams_.InFlight([this](int peer) { return tr_.PeerName(peer); }));
  }

 private:
  using Streams = TransferStreams<Progress>;
  static constexpr size_t kNone = Streams::kNone;
  static constexpr size_t kConsumeBufferBytes = TcpTransport::kConsumeBufferBytes;

  MessageTag TagOf(const Transfer& t) const { return TransferTag(t, tag_); }

  void RestartSpin() { spin_until_ = SteadyClock::now() + std::chrono::microseconds(tr_.options_.spin_microseconds); }

  // One call on `stream`'s socket for its current transfer; completes it
  // when its header and every byte moved.
  absl::Status Step(size_t stream, bool* moved) {
    const size_t i = streams_.current[stream];
    Transfer& t = streams_.at(i);
    Progress& p = streams_.progress[i];
    const MessageTag tag = TagOf(t);
    Peer& peer = tr_.peers_[t.peer];
    if (t.kind == Transfer::Kind::kSend && peer.send != Peer::Link::kReady) {
      // The first send to this peer: connect, then wait for its answer.
      if (peer.send == Peer::Link::kNone) {
        LOCKSTEP_RETURN_IF_ERROR(Handshake::Connect(tr_, t.peer, deadline_));
        *moved = true;
      }
      LOCKSTEP_ASSIGN_OR_RETURN(const bool answered, Handshake::ReadAnswer(tr_, t.peer));
      if (!answered) {
        may_progress_[stream] = false;
        return absl::OkStatus();
      }
      *moved = true;
    }
    if (t.kind == Transfer::Kind::kRecv && !peer.recv_fd.valid()) {
      // Until the peer connects (Run accepts it). Meanwhile this rank's own
      // connection to it tells whether it is still there: a peer that
      // exits closes it (its kernel does, however it died), so a receive
      // from a rank that has gone fails now rather than at the deadline.
      absl::Status alive;
      if (peer.send == Peer::Link::kNone) {
        alive = Handshake::Connect(tr_, t.peer, deadline_);
        *moved = true;
      }
      if (alive.ok() && peer.send == Peer::Link::kAnswering) {
        absl::StatusOr<bool> answered = Handshake::ReadAnswer(tr_, t.peer);
        alive = answered.status();
        *moved |= answered.ok() && *answered;
      } else if (alive.ok()) {
        alive = Handshake::CheckAlive(tr_, t.peer, tag);
      }
      if (!alive.ok()) {
        // A peer that aborted connects to say why before it goes: its
        // reason, if it came, is the better error.
        if (tr_.Accepting()) LOCKSTEP_RETURN_IF_ERROR(Handshake::TryAccept(tr_, deadline_).status());
        if (!peer.recv_fd.valid()) return alive;
        *moved = true;
        return absl::OkStatus();  // The receive reads it next.
      }
      may_progress_[stream] = false;
      return absl::OkStatus();
    }
    if (t.kind == Transfer::Kind::kSend) {
      LOCKSTEP_RETURN_IF_ERROR(Send(stream, t, p, tag, moved));
    } else {
      LOCKSTEP_RETURN_IF_ERROR(Receive(stream, t, p, tag, moved));
    }
    if (p.header_done == sizeof(MessageHeader) && p.done == t.bytes) {
      if (t.kind == Transfer::Kind::kRecv && t.on_segment && t.bytes == 0) {
        LOCKSTEP_RETURN_IF_ERROR(t.on_segment(0, 0));
      }
      p.complete = true;
      streams_.current[stream] = streams_.next[i];
      --streams_.remaining;
      *moved = true;
      if (t.on_done) LOCKSTEP_RETURN_IF_ERROR(t.on_done());
    }
    return absl::OkStatus();
  }

  // The rest of the header and what `ready` allows of the payload, in one
  // sendmsg.
  absl::Status Send(size_t stream, Transfer& t, Progress& p, const MessageTag& tag, bool* moved) {
    iovec iov[2];
    int n_iov = 0;
    if (p.header_done < sizeof(MessageHeader)) {
      if (p.header_done == 0) p.header = MakeMessageHeader(tag, t.bytes);
      iov[n_iov++] = {reinterpret_cast<char*>(&p.header) + p.header_done, sizeof(MessageHeader) - p.header_done};
    }
    const size_t allowed = SendableBytes(t);
    if (p.done < allowed) iov[n_iov++] = {static_cast<char*>(t.data) + p.done, allowed - p.done};
    if (n_iov == 0) return absl::OkStatus();
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n_iov;
    const ssize_t n = ::sendmsg(tr_.peers_[t.peer].send_fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if ((n < 0 && errno != EINTR) || (n >= 0 && static_cast<size_t>(n) < IovBytes(iov, n_iov))) {
      may_progress_[stream] = false;  // The socket buffer is full.
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("sending op #", tag.seq, " (tag ", tag.tag, ") to ",
                                                 tr_.PeerName(t.peer), " failed: ", std::strerror(errno),
                                                 "; that rank has probably exited or aborted"));
    }
    if (n > 0) {
      const size_t sent = static_cast<size_t>(n);
      const size_t header_part = std::min(sent, sizeof(MessageHeader) - p.header_done);
      p.header_done += header_part;
      p.done += sent - header_part;
      tr_.traffic_.Sent(t.peer, sent - header_part);
      *moved = true;
    }
    return absl::OkStatus();
  }

  // The rest of the header and of the payload, in one recvmsg; the header,
  // once whole, is checked (or routed, or is a peer's abort).
  absl::Status Receive(size_t stream, Transfer& t, Progress& p, const MessageTag& tag, bool* moved) {
    const int fd = tr_.peers_[t.peer].recv_fd.get();
    if (p.header_done == 0 && tr_.peers_[t.peer].held) {
      // The header an earlier routed receive left: this receive's.
      p.header = tr_.peers_[t.peer].held_header;
      p.header_done = sizeof(MessageHeader);
      tr_.peers_[t.peer].held = false;
      *moved = true;
      return ReceivedHeader(stream, fd, t, p, tag, static_cast<char*>(t.data));
    }
    iovec iov[2];
    int n_iov = 0;
    if (p.header_done < sizeof(MessageHeader)) {
      iov[n_iov++] = {reinterpret_cast<char*>(&p.header) + p.header_done, sizeof(MessageHeader) - p.header_done};
    }
    // With `consume`, the payload goes through the receive buffer, a piece
    // at a time (handed over below, once the header is checked).
    char* payload = static_cast<char*>(t.data) + p.done;
    size_t payload_room = t.bytes - p.done;
    if (t.consume && p.done < t.bytes) {
      if (tr_.consume_buffer_ == nullptr) {
        tr_.consume_buffer_.reset(static_cast<char*>(std::aligned_alloc(kConsumeAlign, kConsumeBufferBytes)));
        if (tr_.consume_buffer_ == nullptr) return absl::ResourceExhaustedError("TcpTransport: no receive buffer");
      }
      payload = tr_.consume_buffer_.get();
      std::memcpy(payload, p.carry, p.carried);  // Another stream may have used the buffer since.
      payload_room = std::min(payload_room, kConsumeBufferBytes - p.carried);
    }
    if (p.done < t.bytes) iov[n_iov++] = {t.consume ? payload + p.carried : payload, payload_room};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n_iov;
    const ssize_t n = n_iov > 0 ? ::recvmsg(fd, &msg, MSG_DONTWAIT) : 0;
    if ((n < 0 && errno != EINTR) || (n > 0 && static_cast<size_t>(n) < IovBytes(iov, n_iov))) {
      may_progress_[stream] = false;  // Took all that had arrived.
    }
    if (n == 0 && n_iov > 0) {
      return absl::UnavailableError(
          absl::StrCat(tr_.PeerName(t.peer), " closed the connection during op #", tag.seq,
                       " (it exited, crashed or aborted after an error of its own; see its log)"));
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return absl::UnavailableError(
          absl::StrCat("receiving op #", tag.seq, " from ", tr_.PeerName(t.peer), " failed: ", std::strerror(errno)));
    }
    if (n > 0) {
      *moved = true;
      const size_t got = static_cast<size_t>(n);
      const bool had_header = p.header_done == sizeof(MessageHeader);
      const size_t header_part = std::min(got, sizeof(MessageHeader) - p.header_done);
      const size_t payload_got = got - header_part;
      p.header_done += header_part;
      p.done += payload_got;
      tr_.traffic_.Received(t.peer, payload_got);
      if (!had_header && p.header_done == sizeof(MessageHeader)) {
        LOCKSTEP_RETURN_IF_ERROR(ReceivedHeader(stream, fd, t, p, tag, payload));
      }
      if (t.consume && payload_got > 0) {
        // Whole multiples of kConsumeAlign (all that is left at the end);
        // the rest waits in p.carry for the next read.
        const size_t have = p.carried + payload_got;
        const size_t give = p.done == t.bytes ? have : have / kConsumeAlign * kConsumeAlign;
        if (give > 0) LOCKSTEP_RETURN_IF_ERROR(t.consume(p.consumed, payload, give));
        p.consumed += give;
        p.carried = have - give;
        std::memcpy(p.carry, payload + give, p.carried);
      }
    }
    if (p.header_done == sizeof(MessageHeader)) return ReportSegments(t, t.consume ? p.consumed : p.done, &p.reported);
    return absl::OkStatus();
  }

  // `payload`: where the payload's first p.done bytes landed (t.data, or
  // the receive buffer of a consume).
  absl::Status ReceivedHeader(size_t stream, int fd, Transfer& t, const Progress& p, const MessageTag& tag,
                              const char* payload) {
    const MessageHeader& h = p.header;
    if (h.magic == kMessageMagic && h.tag == kAbortTag && h.bytes <= kMaxAbortReason) {
      // Part of the reason may already sit at the start of the payload.
      std::string reason(payload, std::min<size_t>(p.done, h.bytes));
      if (reason.size() < h.bytes) {
        const size_t have = reason.size();
        reason.resize(h.bytes);
        const absl::Status got_rest = RecvAll(fd, reason.data() + have, h.bytes - have,
                                              DeadlineIn(std::chrono::milliseconds(1000)), tr_.PeerName(t.peer));
        if (!got_rest.ok()) reason.resize(have);
      }
      return absl::UnavailableError(
          absl::StrCat(tr_.PeerName(t.peer), " aborted during op #", tag.seq, " because: ", reason));
    }
    if (t.route && h.magic == kMessageMagic) {
      // Its destination is chosen now that the message is known.
      LOCKSTEP_ASSIGN_OR_RETURN(t.data, t.route(MessageTag{h.seq, h.tag, static_cast<uint8_t>(h.element)}, h.bytes));
      if (t.data == LeaveMessage()) {
        // Not this receive's: the next receive from the peer starts with
        // it (a router reads the header alone, so its payload is still in
        // the socket), and may do so at once.
        tr_.peers_[t.peer].held = true;
        tr_.peers_[t.peer].held_header = h;
        t.data = nullptr;
        t.bytes = 0;
        may_progress_[stream] = true;
        return absl::OkStatus();
      }
      t.bytes = h.bytes;
      return absl::OkStatus();
    }
    return CheckMessageHeader(
        h, tag, t.bytes, [&] { return tr_.PeerName(t.peer); }, tr_.rank_);
  }

  // Nothing moved: every stream not held back by `ready` (sends waiting for
  // our own receives) waits for its socket. poll() says which can go on: at
  // once while spinning (yielding between tries), then sleeping. False once
  // the deadline passed.
  absl::StatusOr<bool> Wait() {
    fds_.clear();
    fd_stream_.clear();
    bool awaiting_connection = false;
    for (size_t stream = 0; stream < streams_.current.size(); ++stream) {
      if (streams_.current[stream] == kNone) continue;
      const Transfer& t = streams_.at(streams_.current[stream]);
      const Progress& p = streams_.progress[streams_.current[stream]];
      const Peer& peer = tr_.peers_[t.peer];
      if (t.kind == Transfer::Kind::kSend) {
        if (peer.send == Peer::Link::kAnswering) {
          fds_.push_back({peer.send_fd.get(), POLLIN, 0});  // Its answer.
          fd_stream_.push_back(stream);
          continue;
        }
        const size_t allowed = SendableBytes(t);
        if (p.header_done == sizeof(MessageHeader) && p.done >= allowed) continue;
        fds_.push_back({peer.send_fd.get(), POLLOUT, 0});
      } else {
        if (!peer.recv_fd.valid()) {
          // The listener below wakes us when it connects; our connection to
          // it when it answers or goes.
          awaiting_connection = true;
          if (peer.send_fd.valid()) {
            fds_.push_back({peer.send_fd.get(), POLLIN, 0});
            fd_stream_.push_back(stream);
          }
          continue;
        }
        fds_.push_back({peer.recv_fd.get(), POLLIN, 0});
      }
      fd_stream_.push_back(stream);
    }
    if (fds_.empty() && !awaiting_connection) {
      return absl::InternalError(
          "TcpTransport::Exchange: every pending send waits for data that no receive will produce");
    }
    const size_t accept_from = fds_.size();
    Deadline wake = deadline_;
    if (tr_.Accepting()) {
      accept_fds_.clear();
      tr_.acceptor_->AppendPollFds(&accept_fds_, &wake);
      for (int fd : accept_fds_) fds_.push_back({fd, POLLIN, 0});
    }
    const size_t accept_to = fds_.size();
    const bool wake_fd = feed_ != nullptr && feed_->wake_fd() >= 0;
    if (wake_fd) fds_.push_back({feed_->wake_fd(), POLLIN, 0});
    const Deadline now = SteadyClock::now();
    if (now >= deadline_) return false;
    const bool spinning = now < spin_until_;
    int timeout_ms = spinning ? 0 : PollTimeoutMs(wake);
    if (feed_ != nullptr && !wake_fd) timeout_ms = std::min(timeout_ms, 1);
    const int rc = ::poll(fds_.data(), fds_.size(), timeout_ms);
    if (rc > 0) {
      for (size_t k = 0; k < fd_stream_.size(); ++k) {
        if (fds_[k].revents != 0) may_progress_[fd_stream_[k]] = true;  // Errors too: the call reports them.
      }
      for (size_t k = accept_from; k < accept_to; ++k) may_accept_ |= fds_[k].revents != 0;
      return true;
    }
    // After a real sleep a pending connection's handshake time may be up:
    // the acceptor drops it.
    if (accept_to > accept_from && !spinning) may_accept_ = true;
    if (spinning) {
      sched_yield();
      return true;
    }
    if (SteadyClock::now() >= deadline_) return false;
    RestartSpin();
    return true;
  }

  TcpTransport& tr_;
  Streams streams_;
  const MessageTag tag_;
  const Deadline deadline_;
  TransferFeed* const feed_;
  // Whether a stream's socket may accept (send) or deliver (receive) bytes
  // now: cleared when a call returns EAGAIN or less than asked, set again
  // by poll(). Calls go only to sockets that can progress; retrying
  // recvmsg in a loop would take the socket lock each time and contend with
  // the sender's CPU delivering packets into that socket.
  absl::InlinedVector<bool, 16> may_progress_;
  Deadline spin_until_;
  absl::InlinedVector<pollfd, 16> fds_;
  absl::InlinedVector<size_t, 16> fd_stream_;
  // Whether the listener or a connection still introducing itself may have
  // something: true at first (peers may have connected between exchanges).
  bool may_accept_ = true;
  std::vector<int> accept_fds_;
};

absl::Status TcpTransport::Run(absl::Span<Transfer> initial, MessageTag tag, Deadline deadline, TransferFeed* feed) {
  if (aborted_) {
    return absl::FailedPreconditionError("TcpTransport: aborted after an earlier error; create a new communicator");
  }
  return Op(*this, initial, tag, deadline, feed).Run();
}

}  // namespace lockstep
