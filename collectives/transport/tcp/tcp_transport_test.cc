// TcpTransport's handshakes against a peer that is not a current lockstep
// rank: an old protocol version or garbage is refused with an error naming
// the problem, within the timeout, instead of hanging or building a
// connection that would misread every message. Both ways of connecting:
// the full mesh inside Create, and on demand (the first exchange).
#include "collectives/transport/tcp/tcp_transport.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/store/hash_store.h"
#include "collectives/testing/transport_conformance.h"
#include "collectives/transport/tcp/socket.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

// What a rank sends first on each connection (magic "LKTP", version, rank,
// world size), as tcp_transport.cc lays it out.
struct Hello {
  uint32_t magic;
  uint32_t version;
  int32_t rank;
  int32_t size;
  uint8_t nonce_and_mac[48];  // Version 3: 16-byte nonce, 32-byte MAC.
};

// Publishes "rank 1" in `store` at 127.0.0.1:`port` (with an all-zero
// challenge), as a real rank 1 would before any connection.
absl::Status PublishRank1(Store& store, int port) {
  LOCKSTEP_RETURN_IF_ERROR(store.Set("tcp_transport/1/challenge", std::string(32, '0')));
  return store.Set("tcp_transport/1", HostPort("127.0.0.1", port));
}

// Plays "rank 1" of a 2-rank group against a real rank 0: publishes a
// listening address, connects to rank 0 and sends `hello` bytes. Returns rank
// 0's TcpTransport::Create status (full mesh), or that of its first receive
// from rank 1 (on demand).
absl::Status SetUpAgainst(const std::string& hello_bytes, bool full_mesh) {
  HashStore store;
  TcpTransportOptions options;
  options.timeout = Milliseconds(10000);
  options.full_mesh = full_mesh;
  int port = 0;
  absl::StatusOr<Fd> listener = Listen("127.0.0.1", 0, &port);
  if (!listener.ok()) return listener.status();
  LOCKSTEP_RETURN_IF_ERROR(PublishRank1(store, port));
  auto rank0 = std::async(std::launch::async, [&] {
    absl::StatusOr<std::unique_ptr<TcpTransport>> t = TcpTransport::Create(store, 0, 2, options);
    if (!t.ok() || full_mesh) return t.status();
    char byte;
    Transfer r = Transfer::Recv(1, &byte, 1);
    return (*t)->Exchange({&r, 1}, MessageTag{1, 0}, DeadlineIn(Milliseconds(10000)));
  });
  const Deadline deadline = DeadlineIn(Milliseconds(10000));
  absl::StatusOr<std::string> address = store.Get("tcp_transport/0", Milliseconds(10000));
  EXPECT_TRUE(address.ok()) << address.status();
  std::string host;
  int rank0_port = 0;
  EXPECT_TRUE(SplitHostPort(*address, &host, &rank0_port).ok());
  absl::StatusOr<Fd> fd = Connect(host, rank0_port, deadline, "rank 0");
  EXPECT_TRUE(fd.ok()) << fd.status();
  EXPECT_TRUE(SendAll(fd->get(), hello_bytes.data(), hello_bytes.size(), deadline, "rank 0").ok());
  if (full_mesh) {
    // Rank 0 also connected to our listener; accepting it keeps its connect
    // from depending on the kernel's backlog.
    absl::StatusOr<Fd> from_rank0 = Accept(listener->get(), deadline, "rank 0");
    EXPECT_TRUE(from_rank0.ok()) << from_rank0.status();
  }
  return rank0.get();
}

// Whether the other end closed `fd` within `wait` (a stranger the rank
// dropped): false, not a hang, if it did not.
bool ClosedWithin(int fd, Milliseconds wait) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(wait.count())) != 1) return false;
  char byte;
  return ::recv(fd, &byte, 1, MSG_DONTWAIT) == 0;
}

std::string Bytes(const Hello& h) { return std::string(reinterpret_cast<const char*>(&h), sizeof(h)); }
// An older version's 16-byte hello.
std::string OldBytes(const Hello& h) { return std::string(reinterpret_cast<const char*>(&h), 16); }

TEST(TcpTransportTest, AnOlderProtocolVersionIsRefusedNamingBothVersions) {
  for (bool full_mesh : {true, false}) {
    const absl::Status s = SetUpAgainst(OldBytes(Hello{0x4C4B5450u, 1, 1, 2, {}}), full_mesh);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("speaks protocol 1, this rank 3; use one lockstep build"), absl::string_view::npos) << s;
  }
}

TEST(TcpTransportTest, GarbageIsRefusedAsNotALockstepRank) {
  for (bool full_mesh : {true, false}) {
    const absl::Status s = SetUpAgainst("GET / HTTP/1.1\r\n", full_mesh);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("is not a lockstep rank (bad handshake)"), absl::string_view::npos) << s;
  }
}

TEST(TcpTransportTest, AWrongWorldSizeIsRefused) {
  for (bool full_mesh : {true, false}) {
    const absl::Status s = SetUpAgainst(Bytes(Hello{0x4C4B5450u, 3, 1, 3, {}}), full_mesh);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("says rank 1 of 3, this group has 2 ranks"), absl::string_view::npos) << s;
  }
}

TEST(TcpTransportTest, ARankClaimingToBeItselfIsRefused) {
  for (bool full_mesh : {true, false}) {
    const absl::Status s = SetUpAgainst(Bytes(Hello{0x4C4B5450u, 3, 0, 2, {}}), full_mesh);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("unexpectedly (twice, or itself)"), absl::string_view::npos) << s;
  }
}

std::vector<std::unique_ptr<Transport>> MakeTransports(int n, bool full_mesh) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::unique_ptr<Transport>> transports(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      TcpTransportOptions options;
      options.timeout = Milliseconds(30000);
      options.full_mesh = full_mesh;
      // On demand the transport keeps the store and reads addresses on
      // first use.
      absl::StatusOr<std::unique_ptr<TcpTransport>> t = TcpTransport::Create(store, r, n, options);
      EXPECT_TRUE(t.ok()) << t.status();
      if (t.ok()) transports[r] = std::move(*t);
    });
  }
  for (std::thread& t : threads) t.join();
  return transports;
}
std::vector<std::unique_ptr<Transport>> MakeTcpTransports(int n) { return MakeTransports(n, false); }
std::vector<std::unique_ptr<Transport>> MakeFullMeshTransports(int n) { return MakeTransports(n, true); }

using testing::TransportConformanceTest;
INSTANTIATE_TEST_SUITE_P(Tcp, TransportConformanceTest,
                         ::testing::Values(testing::TransportFactory{"tcp", MakeTcpTransports},
                                           testing::TransportFactory{"tcp_full_mesh", MakeFullMeshTransports}),
                         testing::TransportFactoryName);

// Sockets this process has open (/proc/self/fd entries that are sockets).
int OpenSockets() {
  int sockets = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const std::filesystem::path target = std::filesystem::read_symlink(entry.path(), error);
    if (!error && target.string().rfind("socket:", 0) == 0) ++sockets;
  }
  return sockets;
}

// On demand, a rank holds connections only to the peers it exchanged with:
// 4 ranks that each send to the next (a ring step) hold the 4 send
// connections (8 sockets in this process) and at most the 4 that a receive
// makes back to a sender that has not connected yet (to notice if it
// exits), beside their 4 listeners; the full mesh holds all 4 x 3 x 2 = 24
// sockets and no listener. Once every peer of a rank has connected to it,
// its listener closes.
TEST(TcpTransportTest, OnDemandConnectsOnlyThePairsThatExchange) {
  for (bool full_mesh : {false, true}) {
    const int before = OpenSockets();
    auto transports = MakeTransports(4, full_mesh);
    ASSERT_EQ(transports.size(), 4u);
    EXPECT_EQ(OpenSockets() - before, full_mesh ? 24 : 4);
    auto ring_step = [&](int shift) {
      std::vector<std::future<absl::Status>> ranks;
      for (int r = 0; r < 4; ++r) {
        ranks.push_back(std::async(std::launch::async, [&, r] {
          uint64_t out = r, in = 0;
          Transfer x[2] = {Transfer::Send((r + shift) % 4, &out, sizeof(out)),
                           Transfer::Recv((r + 4 - shift) % 4, &in, sizeof(in))};
          LOCKSTEP_RETURN_IF_ERROR(
              transports[r]->Exchange(x, MessageTag{static_cast<uint64_t>(shift), 0}, DeadlineIn(Milliseconds(30000))));
          if (in != static_cast<uint64_t>((r + 4 - shift) % 4)) return absl::DataLossError(absl::StrCat("got ", in));
          return absl::OkStatus();
        }));
      }
      for (auto& f : ranks) EXPECT_TRUE(f.get().ok());
    };
    ring_step(1);
    if (full_mesh) {
      EXPECT_EQ(OpenSockets() - before, 24);
    } else {
      EXPECT_GE(OpenSockets() - before, 4 + 8);
      EXPECT_LE(OpenSockets() - before, 4 + 16);
    }
    ring_step(2);
    ring_step(3);
    // Every pair has now talked in both directions: the mesh, no listeners.
    EXPECT_EQ(OpenSockets() - before, 24);
    transports.clear();
    EXPECT_EQ(OpenSockets(), before);
  }
}

// The address rank `rank` published in the store (it listens there).
absl::Status PublishedAddress(Store& store, int rank, std::string* host, int* port) {
  absl::StatusOr<std::string> address = store.Get(absl::StrCat("tcp_transport/", rank), Milliseconds(30000));
  if (!address.ok()) return address.status();
  return SplitHostPort(*address, host, port);
}

// Receives with `consume` (TCP's receive buffer): the payload arrives in
// order, in pieces no longer than the buffer that start at multiples of 64
// bytes (whole elements of any dtype), each before the on_segment
// call that covers it, and `data` is never written; a message of another
// size is refused before anything is handed over.
TEST(TcpTransportTest, ReceivesWithConsumeGetThePayloadInOrderInBufferSizedPieces) {
  auto transports = MakeTcpTransports(2);
  ASSERT_EQ(transports.size(), 2u);
  ASSERT_TRUE(transports[1]->ConsumesInPlace());
  std::vector<uint8_t> sent((3u << 20) + 3);
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<uint8_t>(i * 131 + (i >> 9));
  std::vector<uint8_t> got;
  size_t largest_piece = 0, segments_seen = 0;
  bool order_ok = true;
  auto sender = std::async(std::launch::async, [&] {
    Transfer t = Transfer::Send(1, sent.data(), sent.size());
    return transports[0]->Exchange({&t, 1}, MessageTag{1, 0}, DeadlineIn(Milliseconds(30000)));
  });
  Transfer r = Transfer::Recv(0, nullptr, sent.size());
  r.segment_bytes = 1 << 20;
  r.consume = [&](size_t offset, const void* bytes, size_t length) -> absl::Status {
    if (offset != got.size() || offset % 64 != 0) order_ok = false;  // In order, element-aligned.
    largest_piece = std::max(largest_piece, length);
    const uint8_t* p = static_cast<const uint8_t*>(bytes);
    got.insert(got.end(), p, p + length);
    return absl::OkStatus();
  };
  r.on_segment = [&](size_t offset, size_t length) -> absl::Status {
    if (got.size() < offset + length) order_ok = false;
    ++segments_seen;
    return absl::OkStatus();
  };
  EXPECT_TRUE(transports[1]->Exchange({&r, 1}, MessageTag{1, 0}, DeadlineIn(Milliseconds(30000))).ok());
  EXPECT_TRUE(sender.get().ok());
  EXPECT_TRUE(order_ok);
  EXPECT_TRUE(got == sent);
  EXPECT_LE(largest_piece, TcpTransport::kConsumeBufferBytes);
  EXPECT_EQ(segments_seen, 4u);

  // 100 bytes sent where 200 are expected.
  bool consumed = false;
  auto short_sender = std::async(std::launch::async, [&] {
    Transfer t = Transfer::Send(1, sent.data(), 100);
    return transports[0]->Exchange({&t, 1}, MessageTag{2, 0}, DeadlineIn(Milliseconds(30000)));
  });
  Transfer wrong = Transfer::Recv(0, nullptr, 200);
  wrong.consume = [&](size_t, const void*, size_t) {
    consumed = true;
    return absl::OkStatus();
  };
  const absl::Status s = transports[1]->Exchange({&wrong, 1}, MessageTag{2, 0}, DeadlineIn(Milliseconds(30000)));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("100 bytes"), absl::string_view::npos) << s;
  EXPECT_FALSE(consumed);
  (void)short_sender.get();
}

// With a secret, a process that reaches rank 0's port first and claims to
// be rank 1 (it cannot know the MAC) is dropped, as is one that never says
// anything; the real rank 1 then connects and the data is right. On
// demand the strangers wait beside the exchange, which does not wait for
// them.
TEST(TcpTransportTest, AnImpostorIsDroppedAndTheRealGroupCompletes) {
  for (bool full_mesh : {true, false}) {
    HashStore store;
    TcpTransportOptions options;
    options.timeout = Milliseconds(30000);
    options.handshake_timeout = Milliseconds(300);
    options.secret = "group secret";
    options.full_mesh = full_mesh;
    auto rank0 = std::async(std::launch::async, [&] { return TcpTransport::Create(store, 0, 2, options); });
    std::string host;
    int port = 0;
    ASSERT_TRUE(PublishedAddress(store, 0, &host, &port).ok());
    const Deadline deadline = DeadlineIn(Milliseconds(30000));
    absl::StatusOr<Fd> silent = Connect(host, port, deadline, "rank 0");
    ASSERT_TRUE(silent.ok()) << silent.status();
    absl::StatusOr<Fd> impostor = Connect(host, port, deadline, "rank 0");
    ASSERT_TRUE(impostor.ok()) << impostor.status();
    Hello fake{0x4C4B5450u, 3, 1, 2, {}};
    ASSERT_TRUE(SendAll(impostor->get(), &fake, sizeof(fake), deadline, "rank 0").ok());
    // Now the real rank 1.
    absl::StatusOr<std::unique_ptr<TcpTransport>> rank1 = TcpTransport::Create(store, 1, 2, options);
    ASSERT_TRUE(rank1.ok()) << rank1.status();
    absl::StatusOr<std::unique_ptr<TcpTransport>> t0 = rank0.get();
    ASSERT_TRUE(t0.ok()) << t0.status();
    const absl::Status s = testing::SendOneWord(**rank1, **t0, 1);
    EXPECT_TRUE(s.ok()) << s;
    // Neither stranger got an answer: rank 0 closed them.
    EXPECT_TRUE(ClosedWithin(impostor->get(), Milliseconds(10000)));
    EXPECT_TRUE(ClosedWithin(silent->get(), Milliseconds(10000)));
  }
}

// On demand, the first send checks the answer too: a process listening at
// rank 1's published address that answers without knowing the group's
// secret gets nothing but the hello (no payload byte), and the send fails
// naming the address and the secret.
TEST(TcpTransportTest, AnAnswerWithoutTheSecretFailsTheFirstSend) {
  HashStore store;
  int port = 0;
  absl::StatusOr<Fd> listener = Listen("127.0.0.1", 0, &port);
  ASSERT_TRUE(listener.ok());
  ASSERT_TRUE(PublishRank1(store, port).ok());
  TcpTransportOptions options;
  options.timeout = Milliseconds(30000);
  options.secret = "group secret";
  absl::StatusOr<std::unique_ptr<TcpTransport>> t0 = TcpTransport::Create(store, 0, 2, options);
  ASSERT_TRUE(t0.ok()) << t0.status();
  const uint64_t word = 0x5EC12E7;
  auto sender = std::async(std::launch::async, [&] {
    Transfer t = Transfer::Send(1, &word, sizeof(word));
    return (*t0)->Exchange({&t, 1}, MessageTag{1, 0}, DeadlineIn(Milliseconds(30000)));
  });
  const Deadline deadline = DeadlineIn(Milliseconds(30000));
  absl::StatusOr<Fd> from_rank0 = Accept(listener->get(), deadline, "rank 0");
  ASSERT_TRUE(from_rank0.ok()) << from_rank0.status();
  Hello hello{};
  ASSERT_TRUE(RecvAll(from_rank0->get(), &hello, sizeof(hello), deadline, "rank 0").ok());
  EXPECT_EQ(hello.rank, 0);
  Hello forged{0x4C4B5450u, 3, 1, 2, {}};
  ASSERT_TRUE(SendAll(from_rank0->get(), &forged, sizeof(forged), deadline, "rank 0").ok());
  const absl::Status s = sender.get();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("does not know the group's secret"), absl::string_view::npos) << s;
  // Nothing after the hello reached the stranger (loopback delivers what
  // is sent before the sender's call returns).
  char byte;
  EXPECT_EQ(::recv(from_rank0->get(), &byte, 1, MSG_DONTWAIT), -1);
  EXPECT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK) << std::strerror(errno);
}

// Idle and half-sent connections to a rank's listener, open before the
// real peer arrives and kept open by the test: the group still forms (their
// handshake timeout here is longer than the whole set-up's, so only reading
// the hellos side by side lets it), with and without a secret.
TEST(TcpTransportTest, IdleConnectionsDoNotDelayTheRealRanks) {
  for (bool full_mesh : {true, false}) {
    for (const std::string secret : {"", "group secret"}) {
      HashStore store;
      TcpTransportOptions options;
      options.timeout = Milliseconds(60000);
      options.handshake_timeout = Milliseconds(3600000);
      options.secret = secret;
      options.full_mesh = full_mesh;
      auto rank0 = std::async(std::launch::async, [&] { return TcpTransport::Create(store, 0, 2, options); });
      std::string host;
      int port = 0;
      ASSERT_TRUE(PublishedAddress(store, 0, &host, &port).ok());
      const Deadline deadline = DeadlineIn(Milliseconds(30000));
      std::vector<Fd> strangers;
      for (int i = 0; i < 8; ++i) {
        absl::StatusOr<Fd> idle = Connect(host, port, deadline, "rank 0");
        ASSERT_TRUE(idle.ok()) << idle.status();
        strangers.push_back(std::move(*idle));
      }
      absl::StatusOr<Fd> slow = Connect(host, port, deadline, "rank 0");
      ASSERT_TRUE(slow.ok()) << slow.status();
      Hello partial{0x4C4B5450u, 3, 1, 2, {}};
      ASSERT_TRUE(SendAll(slow->get(), &partial, 20, deadline, "rank 0").ok());
      strangers.push_back(std::move(*slow));
      absl::StatusOr<std::unique_ptr<TcpTransport>> rank1 = TcpTransport::Create(store, 1, 2, options);
      ASSERT_TRUE(rank1.ok()) << secret << ": " << rank1.status();
      absl::StatusOr<std::unique_ptr<TcpTransport>> t0 = rank0.get();
      ASSERT_TRUE(t0.ok()) << secret << ": " << t0.status();
      EXPECT_TRUE(testing::SendOneWord(**rank1, **t0, 77).ok());
      // Formed while every stranger was still connected; rank 0 closed them,
      // unanswered, once its one peer had connected.
      for (const Fd& fd : strangers) EXPECT_TRUE(ClosedWithin(fd.get(), Milliseconds(10000)));
    }
  }
}

// A rank whose published address refuses connections (here: a port nobody
// listens on) is reported at once, not after the long timeout: by Create
// for the full mesh, by the first send to it on demand (which adds that
// the rank may have exited).
TEST(TcpTransportTest, AWrongPublishedAddressFailsAtOnceNamingIt) {
  for (bool full_mesh : {true, false}) {
    HashStore store;
    int port = 0;
    {
      absl::StatusOr<Fd> closed = Listen("127.0.0.1", 0, &port);
      ASSERT_TRUE(closed.ok());
    }
    ASSERT_TRUE(PublishRank1(store, port).ok());
    TcpTransportOptions options;
    options.timeout = Milliseconds(600000);  // The long timeout is not what ends it.
    options.full_mesh = full_mesh;
    absl::StatusOr<std::unique_ptr<TcpTransport>> t0 = TcpTransport::Create(store, 0, 2, options);
    absl::Status s = t0.status();
    if (!full_mesh) {
      ASSERT_TRUE(t0.ok()) << t0.status();
      const uint64_t word = 1;
      Transfer t = Transfer::Send(1, &word, sizeof(word));
      s = (*t0)->Exchange({&t, 1}, MessageTag{1, 0}, DeadlineIn(Milliseconds(600000)));
      EXPECT_NE(s.message().find("has already exited or aborted"), absl::string_view::npos) << s;
    }
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_NE(s.message().find("cannot connect to rank 1 at 127.0.0.1:"), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find("loopback"), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find("LOCKSTEP_SOCKET_IFNAME"), absl::string_view::npos) << s;
  }
}

// RANK 1 given to two processes of a 3-rank group (rank 2 missing): the
// second claimer fails at once naming the duplicate, and rank 0's wait for
// the missing rank names it too instead of only "rank 2 never came".
TEST(TcpTransportTest, ADuplicateRankIsNamed) {
  HashStore store;
  TcpTransportOptions options;
  options.timeout = Milliseconds(2000);
  auto rank0 = std::async(std::launch::async, [&] { return TcpTransport::Create(store, 0, 3, options).status(); });
  auto first = std::async(std::launch::async, [&] { return TcpTransport::Create(store, 1, 3, options).status(); });
  // The second RANK=1 process, once the first has claimed it.
  ASSERT_TRUE(store.Get("tcp_transport/1", Milliseconds(10000)).ok());
  const absl::Status second = TcpTransport::Create(store, 1, 3, options).status();
  EXPECT_EQ(second.code(), absl::StatusCode::kFailedPrecondition) << second;
  EXPECT_NE(second.message().find("RANK 1 is claimed by another process"), absl::string_view::npos) << second;
  const absl::Status s0 = rank0.get();
  EXPECT_NE(s0.message().find("RANK 1 was given to two processes"), absl::string_view::npos) << s0;
  (void)first.get();
}

// With the store kept, Create waits for no other rank: a rank that never
// comes is named by the first exchange that needs its address, and a RANK
// given to two processes (so another is missing) is named as that.
TEST(TcpTransportTest, OnDemandAMissingRankIsNamedByTheFirstExchangeThatNeedsIt) {
  auto store = std::make_shared<HashStore>();
  TcpTransportOptions options;
  options.timeout = Milliseconds(60000);
  absl::StatusOr<std::unique_ptr<TcpTransport>> t0 = TcpTransport::Create(store, 0, 3, options);
  ASSERT_TRUE(t0.ok()) << t0.status();  // Alone: nothing to wait for.
  const uint64_t word = 1;
  Transfer t = Transfer::Send(2, &word, sizeof(word));
  absl::Status s = (*t0)->Exchange({&t, 1}, MessageTag{1, 0}, DeadlineIn(Milliseconds(300)));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("found no address of rank 2"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("has not started"), absl::string_view::npos) << s;
  // RANK 1 twice: the second claimer fails at once, and rank 0's wait for
  // the rank that is therefore missing says why.
  absl::StatusOr<std::unique_ptr<TcpTransport>> first = TcpTransport::Create(store, 1, 3, options);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<TcpTransport>> second = TcpTransport::Create(store, 1, 3, options);
  EXPECT_NE(second.status().message().find("RANK 1 is claimed by another process"), absl::string_view::npos)
      << second.status();
  s = (*t0)->Exchange({&t, 1}, MessageTag{2, 0}, DeadlineIn(Milliseconds(300)));
  EXPECT_NE(s.message().find("RANK 1 was given to two processes"), absl::string_view::npos) << s;
}

TEST(TcpTransportTest, BadOptionsAreRefusedNamingTheField) {
  HashStore store;
  TcpTransportOptions options;
  options.socket_buffer_bytes = -1;
  absl::Status s = TcpTransport::Create(store, 0, 2, options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("socket_buffer_bytes"), absl::string_view::npos) << s;
  options = TcpTransportOptions();
  options.congestion_control = "cubic; rm -rf";
  s = TcpTransport::Create(store, 0, 2, options).status();
  EXPECT_NE(s.message().find("congestion_control"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace lockstep
