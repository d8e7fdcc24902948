// ShmTransport: the transport conformance suite (default rings, and rings so
// small that every message wraps and waits for space), options refused by
// name, in-place consumption, and that a group leaves nothing behind: no
// descriptor, no mapping, nothing in /dev/shm.
#include "collectives/shm_transport.h"

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/hash_store.h"
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

using testing::TransportConformanceTest;
INSTANTIATE_TEST_SUITE_P(
    Shm, TransportConformanceTest,
    ::testing::Values(testing::TransportFactory{"shm", [](int n) { return MakeShmTransports(n, TestOptions()); }},
                      testing::TransportFactory{"shm_tiny_rings",
                                                [](int n) { return MakeShmTransports(n, TinyRings()); }}),
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
    EXPECT_TRUE(transports[0]->Exchange(absl::MakeSpan(&send, 1), MessageTag{3, 1}, DeadlineIn(Milliseconds(30000))).ok());
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
  const absl::Status s = transports[1]->Exchange(absl::MakeSpan(&recv, 1), MessageTag{3, 1},
                                                 DeadlineIn(Milliseconds(30000)));
  sender.join();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(next_offset, bytes);
  EXPECT_EQ(segments_seen, 11u);
  EXPECT_TRUE(got == sent);
  EXPECT_EQ(transports[1]->Traffic().bytes_received[0], bytes);
  EXPECT_EQ(transports[0]->Traffic().bytes_sent[1], bytes);
}

std::multiset<std::string> Entries(const char* dir) {
  std::multiset<std::string> names;
  if (DIR* d = ::opendir(dir)) {
    while (dirent* e = ::readdir(d)) names.insert(e->d_name);
    ::closedir(d);
  }
  return names;
}

int CountMappingsOf(absl::string_view name) {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find(std::string(name)) != std::string::npos) ++count;
  }
  return count;
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
  const absl::Status s = transports[0]->Exchange(absl::MakeSpan(&recv, 1), MessageTag{5, 0},
                                                 DeadlineIn(Milliseconds(30000)));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("rank 1 (shm, pid "), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("closed the connection during op #5"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace lockstep
