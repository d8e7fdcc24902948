#include "collectives/testing/transport_conformance.h"

#include <cstdint>
#include <cstring>
#include <future>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace lockstep {
namespace testing {
namespace {

using RankBody = std::function<absl::Status(Transport& t)>;

// Runs body(rank's transport) on one thread per rank; one status per rank.
std::vector<absl::Status> RunRanks(std::vector<std::unique_ptr<Transport>>& transports, const RankBody& body) {
  std::vector<absl::Status> results(transports.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < transports.size(); ++r) {
    threads.emplace_back([&, r] { results[r] = body(*transports[r]); });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

std::vector<char> Pattern(size_t bytes, int seed) {
  std::vector<char> v(bytes);
  uint32_t x = 2463534242u + static_cast<uint32_t>(seed) * 7919u;
  for (char& c : v) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    c = static_cast<char>(x);
  }
  return v;
}

Deadline Soon() { return DeadlineIn(std::chrono::milliseconds(30000)); }

bool Contains(const absl::Status& s, absl::string_view what) {
  return s.message().find(what) != absl::string_view::npos;
}

// A test that uses only SendOneWord links the suite without running it.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TransportConformanceTest);

TEST_P(TransportConformanceTest, MessagesOnOneStreamArriveInOrder) {
  auto transports = GetParam().make(2);
  const size_t sizes[] = {1, 300000, 0, 4096};
  auto results = RunRanks(transports, [&](Transport& t) -> absl::Status {
    std::vector<std::vector<char>> data;
    std::vector<Transfer> transfers;
    for (int i = 0; i < 4; ++i) {
      data.push_back(t.rank() == 0 ? Pattern(sizes[i], i) : std::vector<char>(sizes[i]));
      Transfer x =
          t.rank() == 0 ? Transfer::Send(1, data[i].data(), sizes[i]) : Transfer::Recv(0, data[i].data(), sizes[i]);
      x.tag = 10 + i;
      transfers.push_back(std::move(x));
    }
    absl::Status s = t.Exchange(absl::MakeSpan(transfers), MessageTag{7, 0}, Soon());
    if (!s.ok() || t.rank() == 0) return s;
    for (int i = 0; i < 4; ++i) {
      if (data[i] != Pattern(sizes[i], i)) return absl::InternalError(absl::StrCat("message ", i, " differs"));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
}

TEST_P(TransportConformanceTest, SegmentsAreReportedInOrderOnceTheirBytesArrived) {
  auto transports = GetParam().make(2);
  constexpr size_t kBytes = 1 << 20 | 17;
  constexpr size_t kSegment = 65536 + 3;
  const std::vector<char> expected = Pattern(kBytes, 1);
  auto results = RunRanks(transports, [&](Transport& t) -> absl::Status {
    if (t.rank() == 0) {
      Transfer x = Transfer::Send(1, expected.data(), kBytes);
      return t.Exchange({&x, 1}, MessageTag{1, 2}, Soon());
    }
    std::vector<char> got(kBytes);
    size_t next = 0;
    Transfer x = Transfer::Recv(0, got.data(), kBytes);
    x.segment_bytes = kSegment;
    x.on_segment = [&](size_t offset, size_t length) -> absl::Status {
      if (offset != next) return absl::InternalError(absl::StrCat("segment at ", offset, ", expected ", next));
      if (length != std::min(kSegment, kBytes - offset)) return absl::InternalError("bad segment length");
      if (std::memcmp(got.data() + offset, expected.data() + offset, length) != 0) {
        return absl::InternalError(absl::StrCat("segment at ", offset, " reported before its bytes arrived"));
      }
      next += length;
      return absl::OkStatus();
    };
    absl::Status s = t.Exchange({&x, 1}, MessageTag{1, 2}, Soon());
    if (s.ok() && next != kBytes) return absl::InternalError(absl::StrCat("segments covered ", next, " bytes"));
    return s;
  });
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
}

TEST_P(TransportConformanceTest, SendsWaitForReady) {
  // Rank 1 sends a pattern to rank 0, which relays it back from the same
  // buffer as it arrives: without the gate it would send zeros.
  auto transports = GetParam().make(2);
  constexpr size_t kBytes = 3 << 20;
  const std::vector<char> expected = Pattern(kBytes, 2);
  auto results = RunRanks(transports, [&](Transport& t) -> absl::Status {
    if (t.rank() == 1) {
      std::vector<char> back(kBytes);
      Transfer x[2] = {Transfer::Send(0, expected.data(), kBytes), Transfer::Recv(0, back.data(), kBytes)};
      x[0].tag = 1;
      x[1].tag = 2;
      absl::Status s = t.Exchange(x, MessageTag{3, 0}, Soon());
      if (s.ok() && back != expected) return absl::InternalError("relayed data differs: sent before it arrived");
      return s;
    }
    std::vector<char> relay(kBytes, 0);
    size_t have = 0;
    Transfer x[2] = {Transfer::Recv(1, relay.data(), kBytes), Transfer::Send(1, relay.data(), kBytes)};
    x[0].tag = 1;
    x[0].segment_bytes = 4096;
    x[0].on_segment = [&](size_t offset, size_t length) {
      have = offset + length;
      return absl::OkStatus();
    };
    x[1].tag = 2;
    x[1].ready = [&] { return have; };
    return t.Exchange(x, MessageTag{3, 0}, Soon());
  });
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
}

TEST_P(TransportConformanceTest, EveryPairAtOnce) {
  auto transports = GetParam().make(4);
  constexpr size_t kBytes = 1 << 20;
  auto results = RunRanks(transports, [&](Transport& t) -> absl::Status {
    const int n = t.size(), r = t.rank();
    std::vector<char> mine = Pattern(kBytes, r);
    std::vector<std::vector<char>> got(n, std::vector<char>(kBytes));
    std::vector<Transfer> x;
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      x.push_back(Transfer::Send(p, mine.data(), kBytes));
      x.push_back(Transfer::Recv(p, got[p].data(), kBytes));
    }
    absl::Status s = t.Exchange(absl::MakeSpan(x), MessageTag{5, 1}, Soon());
    if (!s.ok()) return s;
    for (int p = 0; p < n; ++p) {
      if (p != r && got[p] != Pattern(kBytes, p)) return absl::InternalError(absl::StrCat("from ", p, " differs"));
    }
    const TrafficCounters c = t.Traffic();
    for (int p = 0; p < n; ++p) {
      const uint64_t want = p == r ? 0 : kBytes;
      if (c.bytes_sent[p] != want || c.bytes_received[p] != want) {
        return absl::InternalError(absl::StrCat("traffic with ", p, ": sent ", c.bytes_sent[p], " received ",
                                                c.bytes_received[p], ", expected ", want));
      }
    }
    return absl::OkStatus();
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

TEST_P(TransportConformanceTest, MismatchedHeaderIsAnErrorNamingBothViews) {
  auto transports = GetParam().make(2);
  auto results = RunRanks(transports, [&](Transport& t) -> absl::Status {
    std::vector<char> buffer(100);
    Transfer x = t.rank() == 0 ? Transfer::Send(1, buffer.data(), 100) : Transfer::Recv(0, buffer.data(), 100);
    absl::Status s = t.Exchange({&x, 1}, MessageTag{9, t.rank() == 0 ? 5u : 6u}, Soon());
    if (t.rank() == 1) t.Abort("test over");
    return s;
  });
  EXPECT_FALSE(results[1].ok());
  EXPECT_TRUE(Contains(results[1], "mismatch")) << results[1];
  EXPECT_TRUE(Contains(results[1], "tag 5")) << results[1];
  EXPECT_TRUE(Contains(results[1], "tag 6")) << results[1];
}

TEST_P(TransportConformanceTest, ElementTypesMustAgreeWhenBothAreGiven) {
  // f32 (element 1) against i32 (element 5): the same bytes, another type.
  auto transports = GetParam().make(2);
  auto results = RunRanks(transports, [&](Transport& t) -> absl::Status {
    std::vector<char> buffer(64);
    Transfer x = t.rank() == 0 ? Transfer::Send(1, buffer.data(), 64) : Transfer::Recv(0, buffer.data(), 64);
    absl::Status s = t.Exchange({&x, 1}, MessageTag{2, 0, static_cast<uint8_t>(t.rank() == 0 ? 1 : 5)}, Soon());
    if (t.rank() == 1) t.Abort("test over");
    return s;
  });
  EXPECT_FALSE(results[1].ok());
  EXPECT_TRUE(Contains(results[1], "f32")) << results[1];
  EXPECT_TRUE(Contains(results[1], "i32")) << results[1];
  // Untyped on one side: not checked.
  auto again = GetParam().make(2);
  auto untyped = RunRanks(again, [&](Transport& t) -> absl::Status {
    std::vector<char> buffer(64);
    Transfer x = t.rank() == 0 ? Transfer::Send(1, buffer.data(), 64) : Transfer::Recv(0, buffer.data(), 64);
    return t.Exchange({&x, 1}, MessageTag{2, 0, static_cast<uint8_t>(t.rank() == 0 ? 1 : 0)}, Soon());
  });
  EXPECT_TRUE(untyped[0].ok()) << untyped[0];
  EXPECT_TRUE(untyped[1].ok()) << untyped[1];
}

TEST_P(TransportConformanceTest, DeadlineNamesThePeerAndProgress) {
  auto transports = GetParam().make(2);
  std::vector<char> buffer(1000);
  Transfer x = Transfer::Recv(0, buffer.data(), buffer.size());
  absl::Status s = transports[1]->Exchange({&x, 1}, MessageTag{4, 0}, DeadlineIn(std::chrono::milliseconds(200)));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_TRUE(Contains(s, "rank 0")) << s;
  EXPECT_TRUE(Contains(s, "0 of 1000 bytes")) << s;
}

TEST_P(TransportConformanceTest, AbortTellsTheWaitingPeerWhy) {
  auto transports = GetParam().make(2);
  std::thread aborter([&] { transports[0]->Abort("rank 0 found a NaN"); });
  std::vector<char> buffer(1000);
  Transfer x = Transfer::Recv(0, buffer.data(), buffer.size());
  absl::Status s = transports[1]->Exchange({&x, 1}, MessageTag{4, 0}, Soon());
  aborter.join();
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s, "rank 0")) << s;
  EXPECT_TRUE(Contains(s, "found a NaN")) << s;
  // The aborted transport refuses further work.
  Transfer y = Transfer::Send(1, buffer.data(), 10);
  EXPECT_FALSE(transports[0]->Exchange({&y, 1}, MessageTag{5, 0}, Soon()).ok());
}

// A feed that hands out its transfers one per Poll call.
class OnePerPoll : public TransferFeed {
 public:
  explicit OnePerPoll(std::vector<Transfer> transfers) : transfers_(std::move(transfers)) {}
  void Poll(std::vector<Transfer>* more) override {
    ++polls_;
    if (next_ < transfers_.size()) more->push_back(transfers_[next_++]);
  }
  int polls() const { return polls_; }

 private:
  std::vector<Transfer> transfers_;
  size_t next_ = 0;
  int polls_ = 0;
};

TEST_P(TransportConformanceTest, OpenExchangeRunsLaterTransfersBesideEarlierOnes) {
  // Both ranks first send 16 MiB (far more than any buffer holds), and only
  // then post the receive: it can only finish if the late receive runs
  // beside the stuck send.
  auto transports = GetParam().make(2);
  constexpr size_t kBytes = 16 << 20;
  std::vector<int> done_order[2];
  auto results = RunRanks(transports, [&](Transport& t) -> absl::Status {
    const int r = t.rank(), peer = 1 - r;
    const std::vector<char> mine = Pattern(kBytes, r);
    std::vector<char> theirs(kBytes);
    Transfer send = Transfer::Send(peer, mine.data(), kBytes);
    send.seq = 0;
    send.tag = 1;
    send.on_done = [&, r] {
      done_order[r].push_back(0);
      return absl::OkStatus();
    };
    Transfer recv = Transfer::Recv(peer, theirs.data(), kBytes);
    recv.seq = 0;
    recv.tag = 1;
    recv.on_done = [&, r] {
      done_order[r].push_back(1);
      return absl::OkStatus();
    };
    OnePerPoll feed({send, recv});
    absl::Status s = t.ExchangeOpen(feed, Soon());
    if (s.ok() && theirs != Pattern(kBytes, peer)) return absl::InternalError("received data differs");
    return s;
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(results[r].ok()) << results[r];
    EXPECT_EQ(done_order[r].size(), 2u) << "on_done must run once per transfer";
  }
}

TEST_P(TransportConformanceTest, RoutedReceivesTakeMessagesByTheirTags) {
  // Rank 0 sends three messages; rank 1 accepts whatever comes and puts each
  // where its tag says, learning sizes from the headers.
  auto transports = GetParam().make(2);
  const size_t sizes[] = {70000, 0, 33};
  auto results = RunRanks(transports, [&](Transport& t) -> absl::Status {
    if (t.rank() == 0) {
      std::vector<std::vector<char>> data;
      std::vector<Transfer> x;
      for (int i = 0; i < 3; ++i) {
        data.push_back(Pattern(sizes[i], i));
        x.push_back(Transfer::Send(1, data.back().data(), sizes[i]));
        x.back().seq = 100 + i;
        x.back().tag = 40 + i;
      }
      return t.Exchange(absl::MakeSpan(x), MessageTag{}, Soon());
    }
    std::vector<std::vector<char>> got(3);
    std::vector<Transfer> routers;
    for (int i = 0; i < 3; ++i) {
      Transfer r = Transfer::Recv(0, nullptr, 0);
      r.route = [&](const MessageTag& tag, size_t bytes) -> absl::StatusOr<void*> {
        const int i = static_cast<int>(tag.tag) - 40;
        if (i < 0 || i > 2 || tag.seq != 100u + i) return absl::InternalError("unexpected header");
        got[i].resize(bytes + 1);  // Non-null even for an empty message.
        return static_cast<void*>(got[i].data());
      };
      routers.push_back(std::move(r));
    }
    OnePerPoll feed(routers);
    LOCKSTEP_RETURN_IF_ERROR(t.ExchangeOpen(feed, Soon()));
    for (int i = 0; i < 3; ++i) {
      got[i].pop_back();
      if (got[i] != Pattern(sizes[i], i)) return absl::InternalError(absl::StrCat("message ", i, " differs"));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
}

TEST_P(TransportConformanceTest, ARouteErrorFailsTheExchange) {
  auto transports = GetParam().make(2);
  auto results = RunRanks(transports, [&](Transport& t) -> absl::Status {
    std::vector<char> buffer(10);
    if (t.rank() == 0) {
      Transfer x = Transfer::Send(1, buffer.data(), 10);
      (void)t.Exchange({&x, 1}, MessageTag{1, 2}, Soon());  // May or may not see rank 1's abort.
      return absl::OkStatus();
    }
    Transfer r = Transfer::Recv(0, nullptr, 0);
    r.route = [](const MessageTag&, size_t) -> absl::StatusOr<void*> {
      return absl::InvalidArgumentError("no receive for this message");
    };
    OnePerPoll feed({r});
    absl::Status s = t.ExchangeOpen(feed, Soon());
    t.Abort("test over");
    if (s.ok() || !Contains(s, "no receive for this message")) {
      return absl::InternalError(absl::StrCat("route error not returned: ", s.ToString()));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
}

TEST_P(TransportConformanceTest, ARouteMayLeaveAMessageForTheNextReceive) {
  // Rank 0 sends two messages (70000 bytes, then an empty one); rank 1's
  // routed receive leaves the first where it is, and ordinary receives then
  // take both, header and all.
  auto transports = GetParam().make(2);
  const std::vector<char> first = Pattern(70000, 7);
  auto results = RunRanks(transports, [&](Transport& t) -> absl::Status {
    if (t.rank() == 0) {
      Transfer x[] = {Transfer::Send(1, first.data(), first.size()), Transfer::Send(1, nullptr, 0)};
      x[1].tag = 6;
      return t.Exchange(absl::MakeSpan(x), MessageTag{9, 5}, Soon());
    }
    int routed = 0, done = 0;
    Transfer r = Transfer::Recv(0, nullptr, 0);
    r.route = [&](const MessageTag& tag, size_t bytes) -> absl::StatusOr<void*> {
      ++routed;
      if (tag.seq != 9 || tag.tag != 5 || bytes != first.size()) return absl::InternalError("unexpected header");
      return LeaveMessage();
    };
    r.on_done = [&] {
      ++done;
      return absl::OkStatus();
    };
    OnePerPoll feed({r});
    LOCKSTEP_RETURN_IF_ERROR(t.ExchangeOpen(feed, Soon()));
    if (routed != 1 || done != 1) return absl::InternalError("the route and on_done run once each");
    std::vector<char> got(first.size());
    Transfer x[] = {Transfer::Recv(0, got.data(), got.size()), Transfer::Recv(0, nullptr, 0)};
    x[1].tag = 6;
    LOCKSTEP_RETURN_IF_ERROR(t.Exchange(absl::MakeSpan(x), MessageTag{9, 5}, Soon()));
    if (got != first) return absl::InternalError("the message left in place arrived changed");
    return absl::OkStatus();
  });
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
}

TEST_P(TransportConformanceTest, AnEmptyMessageLeftInPlaceIsTakenNext) {
  // An empty message (a barrier step) left by a router with nothing after it
  // in the stream: the next receive must still find it.
  auto transports = GetParam().make(2);
  auto results = RunRanks(transports, [&](Transport& t) -> absl::Status {
    if (t.rank() == 0) {
      Transfer x = Transfer::Send(1, nullptr, 0);
      LOCKSTEP_RETURN_IF_ERROR(t.Exchange({&x, 1}, MessageTag{3, 1}, Soon()));
      // Wait for rank 1's answer, so that nothing else follows in the stream.
      Transfer y = Transfer::Recv(1, nullptr, 0);
      return t.Exchange({&y, 1}, MessageTag{4, 1}, Soon());
    }
    Transfer r = Transfer::Recv(0, nullptr, 0);
    r.route = [](const MessageTag&, size_t) -> absl::StatusOr<void*> { return LeaveMessage(); };
    OnePerPoll feed({r});
    LOCKSTEP_RETURN_IF_ERROR(t.ExchangeOpen(feed, Soon()));
    Transfer x = Transfer::Recv(0, nullptr, 0);
    LOCKSTEP_RETURN_IF_ERROR(t.Exchange({&x, 1}, MessageTag{3, 1}, Soon()));
    Transfer y = Transfer::Send(0, nullptr, 0);
    return t.Exchange({&y, 1}, MessageTag{4, 1}, Soon());
  });
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
}

TEST_P(TransportConformanceTest, ADroppableReceiveDoesNotHoldTheExchangeOpen) {
  // Rank 1 listens to ranks 0 and 2 but needs one message only (a receive
  // from any rank): once rank 0's came, the listener on the silent rank 2
  // is dropped and the exchange ends long before its deadline.
  auto transports = GetParam().make(3);
  auto results = RunRanks(transports, [&](Transport& t) -> absl::Status {
    if (t.rank() == 0) {
      uint64_t word = 42;
      Transfer x = Transfer::Send(1, &word, sizeof(word));
      return t.Exchange({&x, 1}, MessageTag{1, 1}, Soon());
    }
    if (t.rank() == 2) return absl::OkStatus();
    bool satisfied = false;
    uint64_t word = 0;
    std::vector<Transfer> listeners;
    for (int peer : {0, 2}) {
      Transfer r = Transfer::Recv(peer, nullptr, 0);
      r.route = [&](const MessageTag&, size_t bytes) -> absl::StatusOr<void*> {
        if (bytes != sizeof(word)) return absl::InternalError("unexpected size");
        satisfied = true;
        return static_cast<void*>(&word);
      };
      r.droppable = [&] { return satisfied; };
      listeners.push_back(std::move(r));
    }
    OnePerPoll feed(listeners);
    const Deadline deadline = Soon();
    LOCKSTEP_RETURN_IF_ERROR(t.ExchangeOpen(feed, deadline));
    if (word != 42) return absl::InternalError("the message from rank 0 did not arrive");
    if (SteadyClock::now() >= deadline) return absl::InternalError("the exchange waited for its deadline");
    return absl::OkStatus();
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
absl::Status SendOneWord(Transport& from, Transport& to, uint64_t value) {
  uint64_t got = ~value;
  auto receiver = std::async(std::launch::async, [&] {
    Transfer t = Transfer::Recv(from.rank(), &got, sizeof(got));
    return to.Exchange({&t, 1}, MessageTag{0, 0}, DeadlineIn(std::chrono::milliseconds(10000)));
  });
  Transfer t = Transfer::Send(to.rank(), &value, sizeof(value));
  const absl::Status sent = from.Exchange({&t, 1}, MessageTag{0, 0}, DeadlineIn(std::chrono::milliseconds(10000)));
  const absl::Status received = receiver.get();
  LOCKSTEP_RETURN_IF_ERROR(sent);
  LOCKSTEP_RETURN_IF_ERROR(received);
  if (got != value) return absl::DataLossError(absl::StrCat("sent ", value, ", received ", got));
  return absl::OkStatus();
}

}  // namespace testing
}  // namespace lockstep
