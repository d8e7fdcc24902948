// ShmTransport: the transport conformance suite (default rings, and rings so
// small that every message wraps and waits for space), options refused by
// name, in-place consumption, and that a group leaves nothing behind: no
// descriptor, no mapping, nothing in /dev/shm.
#include "collectives/transport/shm/shm_transport.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/store/hash_store.h"
#include "collectives/testing/process_resources.h"
#include "collectives/testing/transport_conformance.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

std::vector<std::unique_ptr<Transport>> MakeShmTransports(int n, const ShmTransportOptions& options) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::unique_ptr<Transport>> transports(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<ShmTransport>> t = ShmTransport::Create(*store, r, n, options);
      EXPECT_TRUE(t.ok()) << t.status();
      if (t.ok()) transports[r] = std::move(*t);
    });
  }
  for (std::thread& t : threads) t.join();
  return transports;
}

ShmTransportOptions TestOptions() {
  ShmTransportOptions options;
  options.timeout = Milliseconds(30000);
  return options;
}

// Two 4 KiB slots: most messages wrap around the ring and wait for space.
ShmTransportOptions TinyRings() {
  ShmTransportOptions options = TestOptions();
  options.slot_bytes = 4096;
  options.slots = 2;
  options.spin_microseconds = 0;  // Every wait sleeps on the doorbell.
  return options;
}

// Single copy for every message of at least 64 bytes: nearly every
// message of the suite goes through process_vm_readv.
ShmTransportOptions SingleCopyAlways() {
  ShmTransportOptions options = TestOptions();
  options.single_copy_bytes = 64;
  options.single_copy_max_bytes = SIZE_MAX;
  return options;
}

// Single copy from 4 KiB with tiny rings: both paths, one after another on
// the same rings, and every wait sleeps.
ShmTransportOptions SingleCopyTinyRings() {
  ShmTransportOptions options = TinyRings();
  options.single_copy_bytes = 4096;
  return options;
}

ShmTransportOptions RingOnly() {
  ShmTransportOptions options = TestOptions();
  options.single_copy_bytes = 0;
  return options;
}

using testing::CountMappingsOf;
using testing::Entries;
using testing::TransportConformanceTest;
INSTANTIATE_TEST_SUITE_P(
    Shm, TransportConformanceTest,
    ::testing::Values(
        testing::TransportFactory{"shm", [](int n) { return MakeShmTransports(n, TestOptions()); }},
        testing::TransportFactory{"shm_tiny_rings", [](int n) { return MakeShmTransports(n, TinyRings()); }},
        testing::TransportFactory{"shm_ring_only", [](int n) { return MakeShmTransports(n, RingOnly()); }},
        testing::TransportFactory{"shm_single_copy", [](int n) { return MakeShmTransports(n, SingleCopyAlways()); }},
        testing::TransportFactory{"shm_single_copy_tiny_rings",
                                  [](int n) { return MakeShmTransports(n, SingleCopyTinyRings()); }}),
    testing::TransportFactoryName);

std::string FieldOfRefused(const ShmTransportOptions& options) {
  const absl::Status s = ValidateShmTransportOptions(options);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

TEST(ShmTransportOptionsTest, BadValuesAreRefusedNamingTheFieldAndRange) {
  EXPECT_TRUE(ValidateShmTransportOptions(ShmTransportOptions()).ok());
  ShmTransportOptions o;
  o.timeout = Milliseconds(0);
  EXPECT_NE(FieldOfRefused(o).find("ShmTransportOptions.timeout is 0 ms"), std::string::npos);
  o = ShmTransportOptions();
  o.slot_bytes = 1000;
  EXPECT_NE(FieldOfRefused(o).find("ShmTransportOptions.slot_bytes is 1000; it must be a multiple of 64 in [4096, "),
            std::string::npos);
  o.slot_bytes = 4096 + 32;
  EXPECT_NE(FieldOfRefused(o).find("slot_bytes is 4128"), std::string::npos);
  o = ShmTransportOptions();
  o.slots = 1;
  EXPECT_NE(FieldOfRefused(o).find("ShmTransportOptions.slots is 1; it must be in [2, 1024]"), std::string::npos);
  o = ShmTransportOptions();
  o.slots = 1024;
  o.slot_bytes = 16 << 20;
  EXPECT_NE(FieldOfRefused(o).find("ShmTransportOptions.slots x slot_bytes is 17179869184 bytes"), std::string::npos);
  o = ShmTransportOptions();
  o.spin_microseconds = -1;
  EXPECT_NE(FieldOfRefused(o).find("ShmTransportOptions.spin_microseconds is -1; it must be in [0, 1000000]"),
            std::string::npos);
  o = ShmTransportOptions();
  o.pause_microseconds = -2;
  EXPECT_NE(FieldOfRefused(o).find("ShmTransportOptions.pause_microseconds is -2; it must be in [-1, 1000000]"),
            std::string::npos);
  o.pause_microseconds = 0;
  EXPECT_TRUE(ValidateShmTransportOptions(o).ok());
  o = ShmTransportOptions();
  o.single_copy_bytes = 63;
  EXPECT_NE(FieldOfRefused(o).find("ShmTransportOptions.single_copy_bytes is 63; it must be 0 (off) or at least 64"),
            std::string::npos);
  o.single_copy_bytes = 0;
  EXPECT_TRUE(ValidateShmTransportOptions(o).ok());
  o.single_copy_bytes = 64;
  EXPECT_TRUE(ValidateShmTransportOptions(o).ok());
  o.single_copy_bytes = 1 << 20;
  o.single_copy_max_bytes = (1 << 20) - 1;
  EXPECT_NE(FieldOfRefused(o).find("ShmTransportOptions.single_copy_max_bytes is 1048575; it must be at least "
                                   "single_copy_bytes (1048576)"),
            std::string::npos);
  o.single_copy_bytes = 0;  // Off: the maximum does not matter.
  EXPECT_TRUE(ValidateShmTransportOptions(o).ok());
  HashStore store;
  o = ShmTransportOptions();
  o.slots = 0;
  const absl::StatusOr<std::unique_ptr<ShmTransport>> t = ShmTransport::Create(store, 0, 2, o);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  // Refused before anything was published.
  EXPECT_EQ(*store.NumKeys(), 0);
}

TEST(ShmTransportTest, ReceivesWithConsumeSeeThePayloadInPlaceInOrder) {
  auto transports = MakeShmTransports(2, TinyRings());
  ASSERT_TRUE(transports[0]->ConsumesInPlace());
  const size_t bytes = 100003;  // Not a multiple of a slot or a line.
  std::vector<char> sent(bytes);
  for (size_t i = 0; i < bytes; ++i) sent[i] = static_cast<char>(i * 131 + 7);
  std::vector<char> got(bytes, 0);
  size_t next_offset = 0;
  size_t segments_seen = 0;
  absl::Status consume_error;
  std::thread sender([&] {
    Transfer send = Transfer::Send(1, sent.data(), bytes);
    EXPECT_TRUE(
        transports[0]->Exchange(absl::MakeSpan(&send, 1), MessageTag{3, 1}, DeadlineIn(Milliseconds(30000))).ok());
  });
  Transfer recv = Transfer::Recv(0, nullptr, bytes);
  recv.consume = [&](size_t offset, const void* data, size_t length) -> absl::Status {
    if (offset != next_offset) return absl::InternalError(absl::StrCat("offset ", offset, " after ", next_offset));
    std::memcpy(got.data() + offset, data, length);
    next_offset += length;
    return absl::OkStatus();
  };
  recv.segment_bytes = 10000;
  recv.on_segment = [&](size_t offset, size_t length) -> absl::Status {
    // Everything the segment covers was consumed before it is reported.
    if (offset + length > next_offset) return absl::InternalError("segment reported before its bytes were consumed");
    ++segments_seen;
    return absl::OkStatus();
  };
  const absl::Status s =
      transports[1]->Exchange(absl::MakeSpan(&recv, 1), MessageTag{3, 1}, DeadlineIn(Milliseconds(30000)));
  sender.join();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(next_offset, bytes);
  EXPECT_EQ(segments_seen, 11u);
  EXPECT_TRUE(got == sent);
  EXPECT_EQ(transports[1]->Traffic().bytes_received[0], bytes);
  EXPECT_EQ(transports[0]->Traffic().bytes_sent[1], bytes);
}

ShmTransport& Shm(const std::unique_ptr<Transport>& t) { return static_cast<ShmTransport&>(*t); }

std::vector<char> Pattern(size_t bytes, int salt) {
  std::vector<char> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<char>(i * 131 + 7 + salt * 17 + (i >> 12));
  return v;
}

// Rank 0 sends `bytes` to rank 1; returns what arrived.
std::vector<char> SendOne(std::vector<std::unique_ptr<Transport>>& transports, const std::vector<char>& sent,
                          uint64_t seq) {
  std::vector<char> got(sent.size(), 0);
  std::thread sender([&] {
    Transfer send = Transfer::Send(1, sent.data(), sent.size());
    const absl::Status s =
        transports[0]->Exchange(absl::MakeSpan(&send, 1), MessageTag{seq, 2}, DeadlineIn(Milliseconds(30000)));
    EXPECT_TRUE(s.ok()) << s;
  });
  Transfer recv = Transfer::Recv(0, got.data(), got.size());
  const absl::Status s =
      transports[1]->Exchange(absl::MakeSpan(&recv, 1), MessageTag{seq, 2}, DeadlineIn(Milliseconds(30000)));
  sender.join();
  EXPECT_TRUE(s.ok()) << s;
  return got;
}

TEST(ShmSingleCopyTest, MessagesFromTheThresholdUpAreCopiedOnceSmallerOnesThroughTheRing) {
  ShmTransportOptions options = TestOptions();
  options.single_copy_bytes = 100000;
  options.single_copy_max_bytes = 2 << 20;
  auto transports = MakeShmTransports(2, options);
  ASSERT_TRUE(Shm(transports[0]).SingleCopyTo(1));
  ASSERT_TRUE(Shm(transports[1]).SingleCopyTo(0));
  EXPECT_NE(Shm(transports[0])
                .CopyPath()
                .find("single-copy (process_vm_readv) for messages of 100000..2097152 "
                      "bytes to every peer"),
            std::string::npos)
      << Shm(transports[0]).CopyPath();
  const std::vector<char> below = Pattern(99999, 1);
  EXPECT_TRUE(SendOne(transports, below, 1) == below);
  EXPECT_EQ(Shm(transports[1]).SingleCopyBytesReceived(), 0u);
  const std::vector<char> at = Pattern(100000, 2);
  EXPECT_TRUE(SendOne(transports, at, 2) == at);
  EXPECT_EQ(Shm(transports[1]).SingleCopyBytesReceived(), 100000u);
  // Larger than a piece and not a multiple of one; the largest allowed.
  const std::vector<char> large = Pattern((1 << 20) + 13, 3);
  EXPECT_TRUE(SendOne(transports, large, 3) == large);
  const std::vector<char> largest = Pattern(2 << 20, 4);
  EXPECT_TRUE(SendOne(transports, largest, 4) == largest);
  const uint64_t single = 100000u + (1 << 20) + 13 + (2 << 20);
  EXPECT_EQ(Shm(transports[1]).SingleCopyBytesReceived(), single);
  // Above single_copy_max_bytes: the ring again.
  const std::vector<char> above = Pattern((2 << 20) + 1, 5);
  EXPECT_TRUE(SendOne(transports, above, 5) == above);
  EXPECT_EQ(Shm(transports[1]).SingleCopyBytesReceived(), single);
  // The ring still works after single-copy messages.
  EXPECT_TRUE(SendOne(transports, below, 6) == below);
  EXPECT_EQ(Shm(transports[1]).SingleCopyBytesReceived(), single);
  const uint64_t total = 2 * 99999u + single + (2 << 20) + 1;
  EXPECT_EQ(transports[0]->Traffic().bytes_sent[1], total);
  EXPECT_EQ(transports[1]->Traffic().bytes_received[0], total);
}

TEST(ShmSingleCopyTest, OffOnEitherRankMeansTheRingBothWays) {
  {
    auto transports = MakeShmTransports(2, RingOnly());
    EXPECT_FALSE(Shm(transports[0]).SingleCopyTo(1));
    EXPECT_EQ(Shm(transports[0]).CopyPath(), "ring only (single copy off)");
    const std::vector<char> sent = Pattern(1 << 20, 4);
    EXPECT_TRUE(SendOne(transports, sent, 1) == sent);
    EXPECT_EQ(Shm(transports[1]).SingleCopyBytesReceived(), 0u);
  }
  // Rank 0 has it on, rank 1 off: rank 1 will not read, so rank 0 must not
  // describe; rank 1 never describes.
  auto store = std::make_shared<HashStore>();
  std::vector<std::unique_ptr<Transport>> transports(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto t = ShmTransport::Create(*store, r, 2, r == 0 ? SingleCopyAlways() : RingOnly());
      ASSERT_TRUE(t.ok()) << t.status();
      transports[r] = std::move(*t);
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(transports[0] != nullptr && transports[1] != nullptr);
  EXPECT_FALSE(Shm(transports[0]).SingleCopyTo(1));
  EXPECT_FALSE(Shm(transports[1]).SingleCopyTo(0));
  EXPECT_NE(Shm(transports[0]).CopyPath().find("ring only to ranks 1"), std::string::npos)
      << Shm(transports[0]).CopyPath();
  const std::vector<char> sent = Pattern(1 << 20, 5);
  EXPECT_TRUE(SendOne(transports, sent, 1) == sent);
  EXPECT_EQ(Shm(transports[1]).SingleCopyBytesReceived(), 0u);
}

TEST(ShmSingleCopyTest, GatedSendsExposeBytesAsTheyBecomeReadyAndSegmentsArriveInOrder) {
  // As a pipelined ring does: rank 0 forwards what it receives from rank 1,
  // its send gated by how much of the receive has arrived; rank 1 checks
  // that its segments are reported in order and only once their bytes are
  // there.
  for (const ShmTransportOptions& options : {SingleCopyAlways(), SingleCopyTinyRings()}) {
    auto transports = MakeShmTransports(2, options);
    ASSERT_TRUE(Shm(transports[0]).SingleCopyTo(1));
    const size_t bytes = (2 << 20) + 4099;
    const std::vector<char> sent = Pattern(bytes, 6);
    std::vector<char> relay(bytes, 0), back(bytes, 0);
    std::thread rank0([&] {
      size_t arrived = 0;
      Transfer transfers[2] = {Transfer::Recv(1, relay.data(), bytes), Transfer::Send(1, relay.data(), bytes)};
      transfers[0].tag = 0;
      transfers[0].segment_bytes = 100000;
      transfers[0].on_segment = [&](size_t offset, size_t length) -> absl::Status {
        if (offset != arrived) return absl::InternalError(absl::StrCat("segment at ", offset, " after ", arrived));
        arrived = offset + length;
        return absl::OkStatus();
      };
      transfers[1].tag = 1;
      transfers[1].ready = [&] { return arrived; };
      const absl::Status s =
          transports[0]->Exchange(absl::MakeSpan(transfers), MessageTag{7, 0}, DeadlineIn(Milliseconds(30000)));
      EXPECT_TRUE(s.ok()) << s;
    });
    size_t reported = 0;
    int segments = 0;
    Transfer transfers[2] = {Transfer::Send(0, sent.data(), bytes), Transfer::Recv(0, back.data(), bytes)};
    transfers[0].tag = 0;
    transfers[1].tag = 1;
    transfers[1].segment_bytes = 65536;
    transfers[1].on_segment = [&](size_t offset, size_t length) -> absl::Status {
      if (offset != reported) return absl::InternalError(absl::StrCat("segment at ", offset, " after ", reported));
      if (std::memcmp(back.data() + offset, sent.data() + offset, length) != 0) {
        return absl::InternalError(absl::StrCat("segment at ", offset, " reported before its bytes arrived"));
      }
      reported = offset + length;
      ++segments;
      return absl::OkStatus();
    };
    const absl::Status s =
        transports[1]->Exchange(absl::MakeSpan(transfers), MessageTag{7, 0}, DeadlineIn(Milliseconds(30000)));
    rank0.join();
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(reported, bytes);
    EXPECT_EQ(segments, static_cast<int>((bytes + 65535) / 65536));
    EXPECT_TRUE(back == sent);
    EXPECT_EQ(Shm(transports[1]).SingleCopyBytesReceived(), bytes);
    EXPECT_EQ(Shm(transports[0]).SingleCopyBytesReceived(), bytes);
  }
}

TEST(ShmSingleCopyTest, ReceivesWithConsumeGetThePayloadInCacheSizedPiecesInOrder) {
  auto transports = MakeShmTransports(2, SingleCopyAlways());
  const size_t bytes = (1 << 20) + 100003;
  const std::vector<char> sent = Pattern(bytes, 8);
  std::vector<char> got(bytes, 0);
  size_t next_offset = 0, largest_piece = 0, segments_seen = 0;
  std::thread sender([&] {
    Transfer send = Transfer::Send(1, sent.data(), bytes);
    const absl::Status s =
        transports[0]->Exchange(absl::MakeSpan(&send, 1), MessageTag{3, 1}, DeadlineIn(Milliseconds(30000)));
    EXPECT_TRUE(s.ok()) << s;
  });
  Transfer recv = Transfer::Recv(0, nullptr, bytes);
  recv.consume = [&](size_t offset, const void* data, size_t length) -> absl::Status {
    if (offset != next_offset) return absl::InternalError(absl::StrCat("offset ", offset, " after ", next_offset));
    std::memcpy(got.data() + offset, data, length);
    next_offset += length;
    largest_piece = std::max(largest_piece, length);
    return absl::OkStatus();
  };
  recv.segment_bytes = 300000;
  recv.on_segment = [&](size_t offset, size_t length) -> absl::Status {
    if (offset + length > next_offset) return absl::InternalError("segment reported before its bytes were consumed");
    ++segments_seen;
    return absl::OkStatus();
  };
  const absl::Status s =
      transports[1]->Exchange(absl::MakeSpan(&recv, 1), MessageTag{3, 1}, DeadlineIn(Milliseconds(30000)));
  sender.join();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(next_offset, bytes);
  EXPECT_LE(largest_piece, size_t{256} << 10);  // Staging that stays in the L2 cache.
  EXPECT_EQ(segments_seen, (bytes + 299999) / 300000);
  EXPECT_TRUE(got == sent);
  EXPECT_EQ(Shm(transports[1]).SingleCopyBytesReceived(), bytes);
}

TEST(ShmSingleCopyTest, HeadersAreCheckedAsOnTheRing) {
  auto transports = MakeShmTransports(2, SingleCopyAlways());
  const std::vector<char> sent = Pattern(1 << 16, 9);
  std::vector<char> got(sent.size() + 64, 0);
  std::thread sender([&] {
    Transfer send = Transfer::Send(1, sent.data(), sent.size());
    // Fails at its deadline or when the receiver is destroyed: nobody acks.
    (void)transports[0]->Exchange(absl::MakeSpan(&send, 1), MessageTag{4, 1}, DeadlineIn(Milliseconds(2000)));
  });
  Transfer recv = Transfer::Recv(0, got.data(), got.size());
  const absl::Status s =
      transports[1]->Exchange(absl::MakeSpan(&recv, 1), MessageTag{4, 1}, DeadlineIn(Milliseconds(30000)));
  sender.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("collective mismatch"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("with 65536 bytes, but rank 1 expected op #4 tag 1 with 65600 bytes"),
            absl::string_view::npos)
      << s;
}

TEST(ShmTransportTest, AGroupLeavesNoDescriptorMappingOrFileBehind) {
  const std::multiset<std::string> fds_before = Entries("/proc/self/fd");
  const std::multiset<std::string> shm_before = Entries("/dev/shm");
  const int mappings_before = CountMappingsOf("lockstep-shm");
  {
    auto transports = MakeShmTransports(3, TestOptions());
    ASSERT_EQ(transports.size(), 3u);
    // Each rank maps the 3 segments.
    EXPECT_EQ(CountMappingsOf("lockstep-shm"), mappings_before + 9);
    // No file of ours anywhere: /dev/shm unchanged while the group lives.
    EXPECT_EQ(Entries("/dev/shm"), shm_before);
  }
  EXPECT_EQ(Entries("/proc/self/fd"), fds_before);
  EXPECT_EQ(CountMappingsOf("lockstep-shm"), mappings_before);
  EXPECT_EQ(Entries("/dev/shm"), shm_before);
}

TEST(ShmTransportTest, ARankThatDiesIsNamedWithItsPidByTheWaitingPeer) {
  // Both ranks are set up here, then rank 1 lives on only in a forked
  // child (which holds the copies of its socket and mappings) that is killed.
  auto transports = MakeShmTransports(2, TestOptions());
  ASSERT_EQ(transports.size(), 2u);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::pause();  // Killed below.
    ::_exit(0);
  }
  // The parent's copy of rank 1 must go, or its socket stays open here.
  transports[1].reset();
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  std::vector<char> buf(1 << 20);
  Transfer recv = Transfer::Recv(1, buf.data(), buf.size());
  const absl::Status s =
      transports[0]->Exchange(absl::MakeSpan(&recv, 1), MessageTag{5, 0}, DeadlineIn(Milliseconds(30000)));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("rank 1 (shm, pid "), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("closed the connection during op #5"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace lockstep
