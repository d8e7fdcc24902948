// Point to point that cannot deadlock: two ranks each Send 64 MiB and then
// Recv 64 MiB (far beyond any socket buffer), around a ring of 4, over real
// processes on loopback TCP and over the in-memory transport; matching per
// peer in call order; mismatched tags fail naming both; traffic counters.
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
    const auto results =
        RunFakeThreads(n, [](Communicator& comm) { return SendThenRecvAroundTheRing(comm, 100000); }, tiny);
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

TEST(PointToPointTest, MismatchedTagsFailOnTheReceiverNamingBoth) {
  const auto results = RunThreads(2, [](Communicator& comm) -> absl::Status {
    Tensor t = *Tensor::Zeros({10}, DType::kF32);
    absl::Status s = comm.rank() == 0 ? comm.Send(t, 1, /*tag=*/5)->Wait() : comm.Recv(t, 0, /*tag=*/6)->Wait();
    if (comm.rank() == 0) return absl::OkStatus();  // The send may well have finished.
    if (s.ok()) return absl::InternalError("a receive with tag 6 accepted a message with tag 5");
    const std::string m(s.message());
    if (m.find("tag 5") == std::string::npos || m.find("tag 6") == std::string::npos ||
        m.find("Recv #0") == std::string::npos || m.find("from rank 0") == std::string::npos) {
      return absl::InternalError(absl::StrCat("unclear error: ", m));
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
