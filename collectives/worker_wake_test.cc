// The communicator's own thread runs the operations nobody waits on. With
// worker_spin_microseconds = 0 it sleeps as soon as its queue is empty, so
// every operation queued after that must wake it: here no caller ever
// helps (IsCompleted() is polled, Wait() is never called), so an operation
// whose wake-up is lost never runs and the rank fails at its deadline.
// Collectives, point-to-point operations and ThenWork steps, over TCP and
// shared memory.
#include <chrono>
#include <memory>
#include <vector>

#include <sched.h>

#include "absl/strings/str_cat.h"
#include "collectives/communicator.h"
#include "collectives/testing/group.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

// Polls `work` until it completed, for at most 30 s.
absl::Status PollUntilDone(Work& work, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!work.IsCompleted()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(what, " did not run within 30 s: the worker was not woken"));
    }
    sched_yield();
  }
  return work.status();
}

absl::Status Rounds(Communicator& comm) {
  const int r = comm.rank(), peer = 1 - r;
  for (int i = 0; i < 100; ++i) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor sum, Tensor::FromVector<float>(std::vector<float>{static_cast<float>(r + i)}));
    std::shared_ptr<Work> reduced = comm.AllReduce(sum, ReduceOp::kSum);
    LOCKSTEP_RETURN_IF_ERROR(PollUntilDone(*reduced, absl::StrCat("all-reduce ", i)));
    if (sum.data<float>()[0] != static_cast<float>(1 + 2 * i)) {
      return absl::InternalError(absl::StrCat("all-reduce ", i, " gave ", sum.data<float>()[0]));
    }
    // A send or receive, then a step that posts the answer the other way.
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor message, Tensor::FromVector<float>(std::vector<float>{static_cast<float>(i)}));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor answer, Tensor::Zeros({1}, DType::kF32));
    std::shared_ptr<Work> first = r == 0 ? comm.Send(message, peer, 1) : comm.Recv(message, peer, 1);
    std::shared_ptr<Work> chain = first->ThenWork([&]() -> absl::StatusOr<std::shared_ptr<Work>> {
      if (r == 1) answer.data<float>()[0] = message.data<float>()[0] + 0.5f;
      return r == 1 ? comm.Send(answer, peer, 2) : comm.Recv(answer, peer, 2);
    });
    LOCKSTEP_RETURN_IF_ERROR(PollUntilDone(*chain, absl::StrCat("round ", i, "'s send, receive and step")));
    if (answer.data<float>()[0] != static_cast<float>(i) + 0.5f) {
      return absl::InternalError(absl::StrCat("round ", i, "'s answer is ", answer.data<float>()[0]));
    }
  }
  return absl::OkStatus();
}

TEST(WorkerWakeTest, ASleepingWorkerRunsEveryOperationNobodyWaitsOn) {
  TcpCommunicatorOptions tcp = testing::TestOptions();
  tcp.communicator.worker_spin_microseconds = 0;
  for (const absl::Status& s : testing::RunThreads(2, Rounds, tcp)) EXPECT_TRUE(s.ok()) << "TCP: " << s;
  ShmCommunicatorOptions shm = testing::ShmTestOptions();
  shm.communicator.worker_spin_microseconds = 0;
  for (const absl::Status& s : testing::RunShmThreads(2, Rounds, shm)) EXPECT_TRUE(s.ok()) << "shm: " << s;
}

}  // namespace
}  // namespace lockstep
