// Receives from any rank (Communicator::RecvAnySource, c10d's recvAnysource)
// over TCP, shared memory and the in-memory transport: the sender named by
// Work::source_rank(), MPI's matching order against receives from one rank,
// messages kept before the receive was posted, peers that move on to the
// next collective while a receive listens to them, and the errors when no
// message can come or its size differs.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/communicator.h"
#include "collectives/testing/group.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using Runner = std::function<std::vector<absl::Status>(int size, const testing::RankFn& fn)>;

struct Transport {
  const char* name;
  Runner run;
};

std::vector<Transport> Transports() {
  return {
      {"tcp", [](int n, const testing::RankFn& fn) { return testing::RunThreads(n, fn); }},
      {"shm", [](int n, const testing::RankFn& fn) { return testing::RunShmThreads(n, fn); }},
      {"fake", [](int n, const testing::RankFn& fn) { return testing::RunFakeThreads(n, fn); }},
  };
}

class RecvAnySourceTest : public ::testing::TestWithParam<int> {
 protected:
  const Transport& transport() const {
    static const std::vector<Transport> all = Transports();
    return all[static_cast<size_t>(GetParam())];
  }
  std::vector<absl::Status> Run(int n, const testing::RankFn& fn) const { return transport().run(n, fn); }
};

// Rank `from`'s message: its rank in every element, `count` of them.
Tensor MessageOf(int from, int64_t count) {
  Tensor t = *Tensor::Empty({count}, DType::kI32);
  for (int64_t i = 0; i < count; ++i) t.data<int32_t>()[i] = from * 1000 + static_cast<int32_t>(i);
  return t;
}

absl::Status CheckMessage(const Tensor& t, int from, const std::string& what) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.data<int32_t>()[i] != from * 1000 + i) {
      return absl::InternalError(
          absl::StrCat(what, ": element ", i, " is ", t.data<int32_t>()[i], ", not rank ", from, "'s"));
    }
  }
  return absl::OkStatus();
}

using testing::ExpectAllOk;

TEST_P(RecvAnySourceTest, EachSenderIsNamedAndItsDataArrives) {
  for (int n : {2, 3, 5}) {
    ExpectAllOk(Run(n, [n](Communicator& comm) -> absl::Status {
      const int64_t count = 3001;  // Larger than the fake network's buffer of a few KiB.
      if (comm.rank() != 0) {
        LOCKSTEP_RETURN_IF_ERROR(comm.Send(MessageOf(comm.rank(), count), 0, /*tag=*/5)->Wait());
        return comm.Barrier()->Wait();
      }
      std::vector<Tensor> in;
      std::vector<std::shared_ptr<Work>> works;
      for (int k = 1; k < n; ++k) {
        in.push_back(*Tensor::Zeros({count}, DType::kI32));
        works.push_back(comm.RecvAnySource(in.back(), /*tag=*/5));
      }
      std::vector<int> sources;
      for (size_t k = 0; k < works.size(); ++k) {
        LOCKSTEP_RETURN_IF_ERROR(works[k]->Wait());
        sources.push_back(works[k]->source_rank());
        LOCKSTEP_RETURN_IF_ERROR(CheckMessage(in[k], sources.back(), absl::StrCat("receive ", k)));
      }
      std::sort(sources.begin(), sources.end());
      for (int k = 1; k < n; ++k) {
        if (sources[k - 1] != k) return absl::InternalError(absl::StrCat("sources are not ranks 1..", n - 1));
      }
      return comm.Barrier()->Wait();
    }));
  }
}

// MPI's order: a message goes to the earliest posted receive that accepts
// it; messages of one sender and tag arrive in send order.
TEST_P(RecvAnySourceTest, TheEarliestPostedReceiveTakesTheEarliestMessage) {
  ExpectAllOk(Run(2, [](Communicator& comm) -> absl::Status {
    if (comm.rank() == 1) {
      LOCKSTEP_RETURN_IF_ERROR(comm.Send(MessageOf(1, 4), 0, 7)->Wait());
      LOCKSTEP_RETURN_IF_ERROR(comm.Send(MessageOf(2, 4), 0, 7)->Wait());  // "rank 2"'s values: the second one.
      return comm.Barrier()->Wait();
    }
    Tensor a = *Tensor::Zeros({4}, DType::kI32), b = *Tensor::Zeros({4}, DType::kI32);
    std::shared_ptr<Work> any = comm.RecvAnySource(a, 7);
    std::shared_ptr<Work> from1 = comm.Recv(b, 1, 7);
    LOCKSTEP_RETURN_IF_ERROR(any->Wait());
    LOCKSTEP_RETURN_IF_ERROR(from1->Wait());
    LOCKSTEP_RETURN_IF_ERROR(CheckMessage(a, 1, "the receive from any rank"));
    LOCKSTEP_RETURN_IF_ERROR(CheckMessage(b, 2, "the receive from rank 1"));
    if (any->source_rank() != 1 || from1->source_rank() != 1) return absl::InternalError("source rank");
    return comm.Barrier()->Wait();
  }));
}

// Messages that came before any receive wanted them are kept; receives
// from any rank posted later take them in the order they arrived.
TEST_P(RecvAnySourceTest, KeptMessagesAreTakenInArrivalOrder) {
  ExpectAllOk(Run(3, [](Communicator& comm) -> absl::Status {
    const int r = comm.rank();
    if (r != 0) {
      LOCKSTEP_RETURN_IF_ERROR(comm.Send(MessageOf(r, 6), 0, 9)->Wait());
      LOCKSTEP_RETURN_IF_ERROR(comm.Send(MessageOf(r, 1), 0, 3)->Wait());
      return comm.Barrier()->Wait();
    }
    // Tag 3 from rank 2, then from rank 1: each sender's tag-9 message comes
    // ahead of it and is kept, rank 2's first.
    Tensor t = *Tensor::Zeros({1}, DType::kI32);
    LOCKSTEP_RETURN_IF_ERROR(comm.Recv(t, 2, 3)->Wait());
    LOCKSTEP_RETURN_IF_ERROR(comm.Recv(t, 1, 3)->Wait());
    Tensor a = *Tensor::Zeros({6}, DType::kI32), b = *Tensor::Zeros({6}, DType::kI32);
    std::shared_ptr<Work> first = comm.RecvAnySource(a, 9);
    std::shared_ptr<Work> second = comm.RecvAnySource(b, 9);
    LOCKSTEP_RETURN_IF_ERROR(first->Wait());
    LOCKSTEP_RETURN_IF_ERROR(second->Wait());
    if (first->source_rank() != 2 || second->source_rank() != 1) {
      return absl::InternalError(absl::StrCat("sources ", first->source_rank(), ", ", second->source_rank(),
                                              "; expected 2, then 1 (their arrival order)"));
    }
    LOCKSTEP_RETURN_IF_ERROR(CheckMessage(a, 2, "first"));
    LOCKSTEP_RETURN_IF_ERROR(CheckMessage(b, 1, "second"));
    return comm.Barrier()->Wait();
  }));
}

// Rank 1 sends nothing and goes on to a barrier while rank 0 listens to it
// for a receive from any rank: its barrier message waits for the barrier,
// and rank 2's message satisfies the receive.
TEST_P(RecvAnySourceTest, APeerThatMovedOnKeepsItsCollectiveMessage) {
  for (int round = 0; round < 3; ++round) {
    ExpectAllOk(Run(3, [](Communicator& comm) -> absl::Status {
      const int r = comm.rank();
      if (r == 2) LOCKSTEP_RETURN_IF_ERROR(comm.Send(MessageOf(2, 100), 0, 4)->Wait());
      if (r == 0) {
        Tensor in = *Tensor::Zeros({100}, DType::kI32);
        std::shared_ptr<Work> any = comm.RecvAnySource(in, 4);
        LOCKSTEP_RETURN_IF_ERROR(any->Wait());
        if (any->source_rank() != 2) return absl::InternalError(absl::StrCat("source ", any->source_rank()));
        LOCKSTEP_RETURN_IF_ERROR(CheckMessage(in, 2, "received"));
      }
      Tensor x = *Tensor::FromVector<int32_t>({r + 1});
      LOCKSTEP_RETURN_IF_ERROR(comm.AllReduce(x, ReduceOp::kSum)->Wait());
      if (x.data<int32_t>()[0] != 6) return absl::InternalError("the all-reduce after it is wrong");
      return comm.Barrier()->Wait();
    }));
  }
}

// Every other rank went on to a gather at rank 0 instead of sending: rank
// 0 sees their gather messages come where it listens, and fails at once
// (a rank that sends nothing at all is found only at the timeout).
TEST_P(RecvAnySourceTest, NoSenderBeforeTheNextCollectiveIsAMismatchNotAHang) {
  const auto results = Run(3, [](Communicator& comm) -> absl::Status {
    if (comm.rank() == 0) {
      Tensor in = *Tensor::Zeros({3}, DType::kI32);
      return comm.RecvAnySource(in, 11)->Wait();
    }
    Tensor mine = *Tensor::Zeros({2}, DType::kF32);
    return comm.Gather(mine, Tensor(), /*root=*/0)->Wait();
  });
  ASSERT_FALSE(results[0].ok());
  EXPECT_NE(results[0].message().find("every other rank has gone on to its next collective"), std::string::npos)
      << results[0];
  EXPECT_NE(results[0].message().find("RecvAnySource (tag 11)"), std::string::npos) << results[0];
  // Ranks 1 and 2 may have finished their part of the gather (its sends)
  // before rank 0 broke the group: their next operation would fail.
}

TEST_P(RecvAnySourceTest, ASizeMismatchNamesBothSizes) {
  const auto results = Run(2, [](Communicator& comm) -> absl::Status {
    if (comm.rank() == 1) {
      (void)comm.Send(MessageOf(1, 10), 0, 2)->Wait();
      return absl::OkStatus();
    }
    Tensor in = *Tensor::Zeros({12}, DType::kI32);
    const absl::Status s = comm.RecvAnySource(in, 2)->Wait();
    if (s.ok() || s.message().find("expects 48 bytes") == absl::string_view::npos ||
        s.message().find("carries 40") == absl::string_view::npos) {
      return absl::InternalError(absl::StrCat("unclear error: ", s.ToString()));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(results[0].ok()) << results[0];
}

INSTANTIATE_TEST_SUITE_P(Transports, RecvAnySourceTest, ::testing::Values(0, 1, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(Transports()[info.param].name);
                         });

TEST(RecvAnySourceArgumentsTest, AloneOrWithABadTagItIsRefused) {
  ExpectAllOk(testing::RunThreads(1, [](Communicator& comm) -> absl::Status {
    Tensor in = *Tensor::Zeros({1}, DType::kI32);
    const absl::Status alone = comm.RecvAnySource(in)->Wait();
    if (alone.message().find("alone in its group") == absl::string_view::npos)
      return absl::InternalError(alone.ToString());
    return absl::OkStatus();
  }));
  ExpectAllOk(testing::RunThreads(2, [](Communicator& comm) -> absl::Status {
    Tensor in = *Tensor::Zeros({1}, DType::kI32);
    const absl::Status tag = comm.RecvAnySource(in, 0x7FFFFF00u)->Wait();
    if (tag.message().find("must be below") == absl::string_view::npos) return absl::InternalError(tag.ToString());
    return comm.Barrier()->Wait();
  }));
}

}  // namespace
}  // namespace lockstep
