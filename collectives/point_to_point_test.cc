// Point to point that cannot deadlock: two ranks each Send 64 MiB and then
// Recv 64 MiB (far beyond any socket buffer), around a ring of 4, over real
// processes on loopback TCP and over the in-memory transport; matching per
// (peer, tag) in call order; early messages kept within a limit; size
// mismatches named; traffic counters.
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/communicator.h"
#include "collectives/testing/group.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using testing::RunFakeThreads;
using testing::RunProcesses;
using testing::RunThreads;

constexpr int64_t k64MiB = 16 << 20;  // f32 elements

Tensor Filled(int64_t count, float seed) {
  Tensor t = *Tensor::Empty({count}, DType::kF32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < count; ++i) p[i] = seed + static_cast<float>(i % 1000);
  return t;
}

absl::Status Check(const Tensor& t, float seed, const char* what) {
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (p[i] != seed + static_cast<float>(i % 1000)) {
      return absl::InternalError(absl::StrCat(what, ": element ", i, " is ", p[i]));
    }
  }
  return absl::OkStatus();
}

// Every rank sends to its right neighbour, then receives from its left one.
absl::Status SendThenRecvAroundTheRing(Communicator& comm, int64_t count) {
  const int n = comm.size(), r = comm.rank();
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  Tensor out = Filled(count, 1000.0f * r);
  Tensor in = *Tensor::Zeros({count}, DType::kF32);
  std::shared_ptr<Work> send = comm.Send(out, right, /*tag=*/3);
  std::shared_ptr<Work> recv = comm.Recv(in, left, /*tag=*/3);
  if (absl::Status s = send->Wait(); !s.ok()) return s;
  if (absl::Status s = recv->Wait(); !s.ok()) return s;
  if (n == 2 || left != right) return Check(in, 1000.0f * left, "received");
  return absl::OkStatus();
}

TEST(PointToPointTest, TwoProcessesSendEachOther64MiBFirst) {
  const auto results = RunProcesses(2, [](Communicator& comm) { return SendThenRecvAroundTheRing(comm, k64MiB); });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

TEST(PointToPointTest, ARingOfFourProcessesSends64MiBFirst) {
  const auto results = RunProcesses(4, [](Communicator& comm) { return SendThenRecvAroundTheRing(comm, k64MiB); });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

TEST(PointToPointTest, SmallBuffersInMemoryToo) {
  testing::FakeNetworkOptions tiny;
  tiny.capacity_bytes = 4096;
  for (int n : {2, 3, 4}) {
    const auto results = RunFakeThreads(
        n, [](Communicator& comm) { return SendThenRecvAroundTheRing(comm, 100000); }, tiny);
    for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << n << " ranks: " << s;
  }
}

TEST(PointToPointTest, ReceivesMatchSendsPerPeerInCallOrderBetweenCollectives) {
  const auto results = RunThreads(3, [](Communicator& comm) -> absl::Status {
    const int r = comm.rank();
    // Round 1: ranks 1 and 2 each send rank 0 two messages; rank 0 posts its
    // receives interleaved across peers.
    if (r == 0) {
      Tensor a1 = *Tensor::Zeros({5000}, DType::kF32), a2 = *Tensor::Zeros({7}, DType::kF32);
      Tensor b1 = *Tensor::Zeros({5000}, DType::kF32), b2 = *Tensor::Zeros({7}, DType::kF32);
      auto w1 = comm.Recv(b1, 2, 1);
      auto w2 = comm.Recv(a1, 1, 1);
      auto w3 = comm.Recv(a2, 1, 2);
      auto w4 = comm.Recv(b2, 2, 2);
      for (auto& w : {w1, w2, w3, w4}) {
        if (absl::Status s = w->Wait(); !s.ok()) return s;
      }
      if (auto s = Check(a1, 100, "a1"); !s.ok()) return s;
      if (auto s = Check(a2, 101, "a2"); !s.ok()) return s;
      if (auto s = Check(b1, 200, "b1"); !s.ok()) return s;
      if (auto s = Check(b2, 201, "b2"); !s.ok()) return s;
    } else {
      auto w1 = comm.Send(Filled(5000, 100.0f * r), 0, 1);
      auto w2 = comm.Send(Filled(7, 100.0f * r + 1), 0, 2);
      if (absl::Status s = w1->Wait(); !s.ok()) return s;
      if (absl::Status s = w2->Wait(); !s.ok()) return s;
    }
    // A collective between batches, then point to point again.
    Tensor x = Filled(3, 1.0f);
    if (absl::Status s = comm.AllReduce(x, ReduceOp::kSum)->Wait(); !s.ok()) return s;
    if (x.data<float>()[2] != 9.0f) return absl::InternalError("all-reduce between batches is wrong");
    return SendThenRecvAroundTheRing(comm, 1000);
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

// A ThenWork step queued behind a send or receive while its batch runs is a
// step, not a point-to-point operation: the batch leaves it in the queue and
// it runs after the batch, starting the next round. Many rounds, so that
// steps are queued while batches run.
TEST(PointToPointTest, ThenWorkStepsBehindSendsAndReceivesRunAfterTheBatch) {
  const testing::RankFn chains_of_rounds = [](Communicator& comm) -> absl::Status {
    constexpr int kRounds = 200;
    const int r = comm.rank(), peer = 1 - r;
    std::vector<Tensor> in(kRounds);
    std::vector<std::shared_ptr<Work>> chains;
    for (int i = 0; i < kRounds; ++i) {
      in[i] = *Tensor::Zeros({64}, DType::kF32);
      std::shared_ptr<Work> first =
          r == 0 ? comm.Send(Filled(64, static_cast<float>(i)), peer, 1) : comm.Recv(in[i], peer, 1);
      chains.push_back(first->ThenWork([&comm, &in, i, r, peer]() -> absl::StatusOr<std::shared_ptr<Work>> {
        // The answer goes the other way.
        return r == 1 ? comm.Send(Filled(64, static_cast<float>(i) + 0.5f), peer, 2) : comm.Recv(in[i], peer, 2);
      }));
    }
    for (int i = 0; i < kRounds; ++i) {
      if (absl::Status s = chains[i]->Wait(); !s.ok()) return s;
      const float expected = static_cast<float>(i) + (r == 0 ? 0.5f : 0.0f);
      if (auto s = Check(in[i], expected, absl::StrCat("round ", i).c_str()); !s.ok()) return s;
    }
    return absl::OkStatus();
  };
  for (const absl::Status& s : RunThreads(2, chains_of_rounds)) EXPECT_TRUE(s.ok()) << "TCP: " << s;
  for (const absl::Status& s : testing::RunShmThreads(2, chains_of_rounds)) EXPECT_TRUE(s.ok()) << "shm: " << s;
}

TEST(PointToPointTest, TagsMatchIndependentlyAndEarlyMessagesAreKeptAcrossBatches) {
  const auto results = RunThreads(2, [](Communicator& comm) -> absl::Status {
    Tensor a = *Tensor::Zeros({3000}, DType::kF32), b = *Tensor::Zeros({5}, DType::kF32);
    if (comm.rank() == 0) {
      auto w1 = comm.Send(Filled(3000, 10), 1, /*tag=*/1);
      auto w2 = comm.Send(Filled(5, 20), 1, /*tag=*/2);
      if (absl::Status s = w1->Wait(); !s.ok()) return s;
      if (absl::Status s = w2->Wait(); !s.ok()) return s;
      return comm.Barrier()->Wait();
    }
    // Tag 2 first: the tag-1 message arrives before any Recv wants it and is
    // kept; it is taken by a Recv posted after a collective (a later batch).
    if (absl::Status s = comm.Recv(b, 0, /*tag=*/2)->Wait(); !s.ok()) return s;
    if (absl::Status s = comm.Barrier()->Wait(); !s.ok()) return s;
    if (absl::Status s = comm.Recv(a, 0, /*tag=*/1)->Wait(); !s.ok()) return s;
    if (auto s = Check(a, 10, "tag 1"); !s.ok()) return s;
    return Check(b, 20, "tag 2");
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

TEST(PointToPointTest, AnEarlyMessageBeyondTheLimitIsAClearError) {
  TcpCommunicatorOptions options = testing::TestOptions();
  options.algorithms.unexpected_bytes_limit = 1000;
  const auto results = RunThreads(
      2,
      [](Communicator& comm) -> absl::Status {
        if (comm.rank() == 0) {
          (void)comm.Send(Filled(4000, 1), 1, /*tag=*/5)->Wait();  // May fail once rank 1 aborts.
          return absl::OkStatus();
        }
        Tensor t = *Tensor::Zeros({4000}, DType::kF32);
        const absl::Status s = comm.Recv(t, 0, /*tag=*/6)->Wait();
        const std::string m(s.message());
        if (s.code() != absl::StatusCode::kResourceExhausted || m.find("tag 5") == std::string::npos ||
            m.find("16000 bytes") == std::string::npos || m.find("limit is 1000") == std::string::npos ||
            m.find("Recv #0") == std::string::npos) {
          return absl::InternalError(absl::StrCat("unclear error: ", s.ToString()));
        }
        return absl::OkStatus();
      },
      options);
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
}

TEST(PointToPointTest, ASizeMismatchNamesBothSizes) {
  const auto results = RunThreads(2, [](Communicator& comm) -> absl::Status {
    if (comm.rank() == 0) {
      (void)comm.Send(Filled(10, 1), 1)->Wait();
      return absl::OkStatus();
    }
    Tensor t = *Tensor::Zeros({12}, DType::kF32);
    const absl::Status s = comm.Recv(t, 0)->Wait();
    const std::string m(s.message());
    if (s.ok() || m.find("expects 48 bytes") == std::string::npos || m.find("carries 40") == std::string::npos) {
      return absl::InternalError(absl::StrCat("unclear error: ", s.ToString()));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
}

// Tags from 2^31 - 256 up would carry the transports' own tags on the wire:
// refused at the call, naming the limit, and the group is unharmed (the
// largest allowed tag then works).
TEST(PointToPointTest, ATagAtTheLimitIsRefusedAndTheGroupGoesOn) {
  const auto results = RunThreads(2, [](Communicator& comm) -> absl::Status {
    const uint32_t limit = (uint32_t{1} << 31) - 256;
    Tensor t = Filled(4, static_cast<float>(comm.rank()));
    for (uint32_t tag : {limit, limit + 255, uint32_t{1} << 31}) {
      const absl::Status s = comm.rank() == 0 ? comm.Send(t, 1, tag)->Wait() : comm.Recv(t, 0, tag)->Wait();
      if (s.code() != absl::StatusCode::kInvalidArgument ||
          s.message().find(absl::StrCat("must be below ", limit, " (2^31 - 256)")) == absl::string_view::npos) {
        return absl::InternalError(absl::StrCat("tag ", tag, ": unclear error: ", s.ToString()));
      }
    }
    const absl::Status s = comm.rank() == 0 ? comm.Send(t, 1, limit - 1)->Wait() : comm.Recv(t, 0, limit - 1)->Wait();
    if (!s.ok()) return s;
    if (comm.rank() == 1 && t.data<float>()[0] != 0) return absl::InternalError("rank 0's data did not arrive");
    return absl::OkStatus();
  });
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
}

TEST(PointToPointTest, ADtypeMismatchNamesBothTypes) {
  const auto results = RunThreads(2, [](Communicator& comm) -> absl::Status {
    if (comm.rank() == 0) {
      (void)comm.Send(Filled(10, 1), 1)->Wait();
      return absl::OkStatus();
    }
    Tensor t = *Tensor::Zeros({10}, DType::kI32);
    const absl::Status s = comm.Recv(t, 0)->Wait();
    const std::string m(s.message());
    if (s.ok() || m.find("expects i32") == std::string::npos || m.find("carries f32") == std::string::npos) {
      return absl::InternalError(absl::StrCat("unclear error: ", s.ToString()));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
}

TEST(PointToPointTest, TrafficCountersCountPayloadPerPeer) {
  const auto results = RunThreads(2, [](Communicator& comm) -> absl::Status {
    const TrafficCounters before = comm.Traffic();
    if (absl::Status s = SendThenRecvAroundTheRing(comm, 2500); !s.ok()) return s;
    const TrafficCounters after = comm.Traffic();
    const int peer = 1 - comm.rank();
    const uint64_t sent = after.bytes_sent[peer] - before.bytes_sent[peer];
    const uint64_t received = after.bytes_received[peer] - before.bytes_received[peer];
    if (sent != 10000 || received != 10000) {
      return absl::InternalError(absl::StrCat("sent ", sent, ", received ", received, "; expected 10000 each"));
    }
    return absl::OkStatus();
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace lockstep
