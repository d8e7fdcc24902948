// TcpTransport's mesh setup against a peer that is not a current lockstep
// rank: an old protocol version or garbage is refused with an error naming
// the problem, within the setup timeout, instead of hanging or building a
// mesh that would misread every message.
#include "collectives/transport/tcp/tcp_transport.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/store/hash_store.h"
#include "collectives/testing/transport_conformance.h"
#include "collectives/transport/tcp/socket.h"
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

// Plays "rank 1" of a 2-rank group against a real rank 0: publishes a
// listening address, connects to rank 0 and sends `hello` bytes. Returns rank
// 0's TcpTransport::Create status.
absl::Status SetUpAgainst(const std::string& hello_bytes) {
  HashStore store;
  TcpTransportOptions options;
  options.timeout = Milliseconds(10000);
  int port = 0;
  absl::StatusOr<Fd> listener = Listen("127.0.0.1", 0, &port);
  if (!listener.ok()) return listener.status();
  if (absl::Status s = store.Set("tcp_transport/1/challenge", std::string(32, '0')); !s.ok()) return s;
  if (absl::Status s = store.Set("tcp_transport/1", HostPort("127.0.0.1", port)); !s.ok()) return s;
  auto rank0 = std::async(std::launch::async, [&] { return TcpTransport::Create(store, 0, 2, options).status(); });
  const Deadline deadline = DeadlineIn(Milliseconds(10000));
  absl::StatusOr<std::string> address = store.Get("tcp_transport/0", Milliseconds(10000));
  EXPECT_TRUE(address.ok()) << address.status();
  std::string host;
  int rank0_port = 0;
  EXPECT_TRUE(SplitHostPort(*address, &host, &rank0_port).ok());
  absl::StatusOr<Fd> fd = Connect(host, rank0_port, deadline, "rank 0");
  EXPECT_TRUE(fd.ok()) << fd.status();
  EXPECT_TRUE(SendAll(fd->get(), hello_bytes.data(), hello_bytes.size(), deadline, "rank 0").ok());
  // Rank 0 also connected to our listener; accepting it keeps its connect
  // from depending on the kernel's backlog.
  absl::StatusOr<Fd> from_rank0 = Accept(listener->get(), deadline, "rank 0");
  EXPECT_TRUE(from_rank0.ok()) << from_rank0.status();
  return rank0.get();
}

std::string Bytes(const Hello& h) { return std::string(reinterpret_cast<const char*>(&h), sizeof(h)); }
// An older version's 16-byte hello.
std::string OldBytes(const Hello& h) { return std::string(reinterpret_cast<const char*>(&h), 16); }

TEST(TcpTransportTest, AnOlderProtocolVersionIsRefusedNamingBothVersions) {
  const absl::Status s = SetUpAgainst(OldBytes(Hello{0x4C4B5450u, 1, 1, 2, {}}));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("speaks protocol 1, this rank 3; use one lockstep build"), absl::string_view::npos) << s;
}

TEST(TcpTransportTest, GarbageIsRefusedAsNotALockstepRank) {
  const absl::Status s = SetUpAgainst("GET / HTTP/1.1\r\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("is not a lockstep rank (bad handshake)"), absl::string_view::npos) << s;
}

TEST(TcpTransportTest, AWrongWorldSizeIsRefused) {
  const absl::Status s = SetUpAgainst(Bytes(Hello{0x4C4B5450u, 3, 1, 3, {}}));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("says rank 1 of 3, this group has 2 ranks"), absl::string_view::npos) << s;
}

TEST(TcpTransportTest, ARankClaimingToBeItselfIsRefused) {
  const absl::Status s = SetUpAgainst(Bytes(Hello{0x4C4B5450u, 3, 0, 2, {}}));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("unexpectedly (twice, or itself)"), absl::string_view::npos) << s;
}

std::vector<std::unique_ptr<Transport>> MakeTcpTransports(int n) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::unique_ptr<Transport>> transports(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      TcpTransportOptions options;
      options.timeout = Milliseconds(30000);
      absl::StatusOr<std::unique_ptr<TcpTransport>> t = TcpTransport::Create(*store, r, n, options);
      EXPECT_TRUE(t.ok()) << t.status();
      if (t.ok()) transports[r] = std::move(*t);
    });
  }
  for (std::thread& t : threads) t.join();
  return transports;
}

using testing::TransportConformanceTest;
INSTANTIATE_TEST_SUITE_P(Tcp, TransportConformanceTest,
                         ::testing::Values(testing::TransportFactory{"tcp", MakeTcpTransports}),
                         testing::TransportFactoryName);

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
// anything; the real rank 1 then completes the mesh and the data is right.
TEST(TcpTransportTest, AnImpostorIsDroppedAndTheRealGroupCompletes) {
  HashStore store;
  TcpTransportOptions options;
  options.timeout = Milliseconds(30000);
  options.handshake_timeout = Milliseconds(300);
  options.secret = "group secret";
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
  // The impostor got no answer: rank 0 closed it.
  char byte;
  EXPECT_EQ(::recv(impostor->get(), &byte, 1, 0), 0);
  const absl::Status s = testing::SendOneWord(**rank1, **t0, 1);
  EXPECT_TRUE(s.ok()) << s;
}

// Idle and half-sent connections to a rank's listener, open before the
// real peer arrives and kept open by the test: the group still forms (their
// handshake timeout here is longer than the whole set-up's, so only reading
// the hellos side by side lets it), with and without a secret.
TEST(TcpTransportTest, IdleConnectionsDoNotDelayTheRealRanks) {
  for (const std::string secret : {"", "group secret"}) {
    HashStore store;
    TcpTransportOptions options;
    options.timeout = Milliseconds(60000);
    options.handshake_timeout = Milliseconds(3600000);
    options.secret = secret;
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
    // Formed while every stranger was still connected; rank 0 closed them,
    // unanswered, when its set-up ended.
    for (const Fd& fd : strangers) {
      char byte;
      EXPECT_EQ(::recv(fd.get(), &byte, 1, 0), 0);
    }
    EXPECT_TRUE(testing::SendOneWord(**rank1, **t0, 77).ok());
  }
}

// A rank whose published address refuses connections (here: a port nobody
// listens on) is reported at once, not after the long setup timeout.
TEST(TcpTransportTest, AWrongPublishedAddressFailsAtOnceNamingIt) {
  HashStore store;
  int port = 0;
  {
    absl::StatusOr<Fd> closed = Listen("127.0.0.1", 0, &port);
    ASSERT_TRUE(closed.ok());
  }
  ASSERT_TRUE(store.Set("tcp_transport/1/challenge", std::string(32, '0')).ok());
  ASSERT_TRUE(store.Set("tcp_transport/1", HostPort("127.0.0.1", port)).ok());
  TcpTransportOptions options;
  options.timeout = Milliseconds(600000);  // The long setup timeout is not what ends it.
  const absl::Status s = TcpTransport::Create(store, 0, 2, options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("cannot connect to rank 1 at 127.0.0.1:"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("loopback"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("LOCKSTEP_SOCKET_IFNAME"), absl::string_view::npos) << s;
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
