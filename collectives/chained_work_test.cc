// Work::ThenWork on a communicator: the collectives a continuation starts
// run right after it, at the place ThenWork was called, so the ranks agree
// on the order however their threads interleave. Rank 0 waits for the first
// round before it queues an unrelated collective (so on rank 0 the chain's
// next round is started after that one was queued), the other ranks queue
// it at once; each round has its own size, so a different order would be a
// size mismatch. A chain of three rounds with a computation between them,
// an error in the middle, threads over TCP and shared memory.
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/communicator.h"
#include "collectives/testing/group.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

absl::StatusOr<Tensor> Filled(int64_t count, float value) {
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({count}, DType::kF32));
  for (int64_t i = 0; i < count; ++i) t.data<float>()[i] = value;
  return t;
}

absl::Status ExpectFilled(const Tensor& t, float value, const char* what) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.data<float>()[i] != value) {
      return absl::InternalError(absl::StrCat(what, "[", i, "] is ", t.data<float>()[i], ", expected ", value));
    }
  }
  return absl::OkStatus();
}

// Rank r contributes r + 1; S = n(n + 1) / 2 is the sum over n ranks.
absl::Status InterleavedChains(Communicator& comm) {
  const float mine = static_cast<float>(comm.rank() + 1);
  const float n = static_cast<float>(comm.size()), sum = n * (n + 1) / 2;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor first, Filled(7, mine));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor second, Filled(3, 0));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor third, Filled(11, 0));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor other, Filled(5, mine));
  std::shared_ptr<Work> round1 = comm.AllReduce(first, ReduceOp::kSum);
  std::shared_ptr<Work> chain = round1
                                    ->ThenWork([&]() -> absl::StatusOr<std::shared_ptr<Work>> {
                                      // The second round's input comes from the first's result.
                                      for (int64_t i = 0; i < second.numel(); ++i)
                                        second.data<float>()[i] = first.data<float>()[0] * mine;
                                      return comm.AllReduce(second, ReduceOp::kSum);
                                    })
                                    ->ThenWork([&]() -> absl::StatusOr<std::shared_ptr<Work>> {
                                      for (int64_t i = 0; i < third.numel(); ++i)
                                        third.data<float>()[i] = second.data<float>()[0] + mine;
                                      return comm.AllReduce(third, ReduceOp::kSum);
                                    });
  if (comm.rank() == 0) LOCKSTEP_RETURN_IF_ERROR(round1->Wait());
  std::shared_ptr<Work> unrelated = comm.AllReduce(other, ReduceOp::kSum);
  LOCKSTEP_RETURN_IF_ERROR(chain->Wait());
  LOCKSTEP_RETURN_IF_ERROR(unrelated->Wait());
  LOCKSTEP_RETURN_IF_ERROR(ExpectFilled(first, sum, "first"));
  LOCKSTEP_RETURN_IF_ERROR(ExpectFilled(second, sum * sum, "second"));
  LOCKSTEP_RETURN_IF_ERROR(ExpectFilled(third, n * sum * sum + sum, "third"));
  return ExpectFilled(other, sum, "other");
}

TEST(ChainedWorkTest, RoundsStartedByContinuationsRunInTheSameOrderOnEveryRank) {
  for (int ranks : {2, 3}) {
    for (int repeat = 0; repeat < 20; ++repeat) {
      for (const absl::Status& s : testing::RunThreads(ranks, InterleavedChains)) {
        ASSERT_TRUE(s.ok()) << ranks << " ranks over TCP, repeat " << repeat << ": " << s;
      }
      for (const absl::Status& s : testing::RunShmThreads(ranks, InterleavedChains)) {
        ASSERT_TRUE(s.ok()) << ranks << " ranks over shared memory, repeat " << repeat << ": " << s;
      }
    }
  }
}

// Several chains in flight at once, as DDP's buckets with a two-round hook:
// every chain's rounds, and every rank's results, right.
TEST(ChainedWorkTest, ManyChainsInFlightAtOnce) {
  constexpr int kChains = 8;
  const auto results = testing::RunThreads(2, [](Communicator& comm) -> absl::Status {
    std::vector<Tensor> a(kChains), b(kChains);
    std::vector<std::shared_ptr<Work>> chains;
    for (int c = 0; c < kChains; ++c) {
      LOCKSTEP_ASSIGN_OR_RETURN(a[c], Filled(1 + c, static_cast<float>(comm.rank() + c)));
      LOCKSTEP_ASSIGN_OR_RETURN(b[c], Filled(100 + c, 0));
      chains.push_back(
          comm.AllReduce(a[c], ReduceOp::kSum)->ThenWork([&comm, &a, &b, c]() -> absl::StatusOr<std::shared_ptr<Work>> {
            for (int64_t i = 0; i < b[c].numel(); ++i) b[c].data<float>()[i] = a[c].data<float>()[0];
            return comm.AllReduce(b[c], ReduceOp::kMax);
          }));
    }
    for (auto& chain : chains) LOCKSTEP_RETURN_IF_ERROR(chain->Wait());
    for (int c = 0; c < kChains; ++c) LOCKSTEP_RETURN_IF_ERROR(ExpectFilled(b[c], 2 * c + 1, "b"));
    return absl::OkStatus();
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

// An error in the middle ends the chain there on every rank; the
// communicator goes on.
TEST(ChainedWorkTest, AContinuationsErrorEndsTheChain) {
  const auto results = testing::RunThreads(2, [](Communicator& comm) -> absl::Status {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Filled(4, 1));
    bool ran_third = false;
    std::shared_ptr<Work> chain = comm.AllReduce(t, ReduceOp::kSum)
                                      ->ThenWork([]() -> absl::StatusOr<std::shared_ptr<Work>> {
                                        return absl::FailedPreconditionError("the hook found no bucket");
                                      })
                                      ->ThenWork([&]() -> absl::StatusOr<std::shared_ptr<Work>> {
                                        ran_third = true;
                                        return comm.AllReduce(t, ReduceOp::kSum);
                                      });
    const absl::Status s = chain->Wait();
    if (s.code() != absl::StatusCode::kFailedPrecondition || ran_third) {
      return absl::InternalError(absl::StrCat("chain ended with ", s.ToString(), ran_third ? ", third ran" : ""));
    }
    LOCKSTEP_RETURN_IF_ERROR(comm.AllReduce(t, ReduceOp::kSum)->Wait());
    return ExpectFilled(t, 4, "t");
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace lockstep
