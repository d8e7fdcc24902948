// Single copy (process_vm_readv) between real processes: faults while a
// single-copy transfer is outstanding, and the collective grid with single
// copy for nearly every message.
//
// One TEST only: testing::RunProcesses numbers its calls per process (a
// child re-runs the test body up to the call it is a rank of), so in a binary
// only the first test that calls it runs its ranks; every scenario is in it.
#include <csignal>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/bootstrap/shm_communicator.h"
#include "collectives/communicator.h"
#include "collectives/testing/group.h"
#include "core/dtype.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using testing::RunShmProcesses;
using testing::ShmTestOptions;

bool Contains(const absl::Status& s, absl::string_view needle) {
  return s.message().find(needle) != absl::string_view::npos;
}

ShmCommunicatorOptions SingleCopy(int64_t bytes) {
  ShmCommunicatorOptions options = ShmTestOptions();
  options.communicator.timeout = Milliseconds(20000);
  options.transport.single_copy_bytes = static_cast<size_t>(bytes);
  options.transport.single_copy_max_bytes = SIZE_MAX;
  return options;
}

// Every rank checks every element of every op's result against a value it
// computes itself.
absl::Status Grid(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{(1 << 18) + 3}}) {
    // All-reduce (SUM, f32: exact for these small integers).
    Tensor t = *Tensor::Zeros({count}, DType::kF32);
    for (int64_t i = 0; i < count; ++i) t.data<float>()[i] = static_cast<float>((i % 97) + r);
    LOCKSTEP_RETURN_IF_ERROR(comm.AllReduce(t, ReduceOp::kSum)->Wait());
    for (int64_t i = 0; i < count; ++i) {
      const float want = static_cast<float>(n * (i % 97) + n * (n - 1) / 2);
      if (t.data<float>()[i] != want) {
        return absl::InternalError(
            absl::StrCat("all-reduce of ", count, ": element ", i, " is ", t.data<float>()[i], ", expected ", want));
      }
    }
    // Broadcast (i64) from the last rank.
    Tensor b = *Tensor::Zeros({count}, DType::kI64);
    if (r == n - 1) {
      for (int64_t i = 0; i < count; ++i) b.data<int64_t>()[i] = i * 3 + 1;
    }
    LOCKSTEP_RETURN_IF_ERROR(comm.Broadcast(b, n - 1)->Wait());
    for (int64_t i = 0; i < count; ++i) {
      if (b.data<int64_t>()[i] != i * 3 + 1) {
        return absl::InternalError(absl::StrCat("broadcast of ", count, ": element ", i, " wrong"));
      }
    }
    // All-gather (u8).
    Tensor in = *Tensor::Zeros({count}, DType::kU8);
    for (int64_t i = 0; i < count; ++i) in.data<uint8_t>()[i] = static_cast<uint8_t>(i * 7 + r);
    Tensor out = *Tensor::Zeros({count * n}, DType::kU8);
    LOCKSTEP_RETURN_IF_ERROR(comm.AllGather(in, out)->Wait());
    for (int q = 0; q < n; ++q) {
      for (int64_t i = 0; i < count; ++i) {
        if (out.data<uint8_t>()[q * count + i] != static_cast<uint8_t>(i * 7 + q)) {
          return absl::InternalError(absl::StrCat("all-gather of ", count, ": rank ", q, " element ", i, " wrong"));
        }
      }
    }
  }
  return absl::OkStatus();
}

TEST(ShmSingleCopyProcessTest, FaultsAndTheGridOnRealProcesses) {
  // Through broadcasts (2 ranks: the root sends the whole tensor, one
  // message) rather than point-to-point: the communicator's collective path
  // is the one the sanitizer runs exercise.
  {
    SCOPED_TRACE("a sender waiting for the acknowledgement of a killed receiver");
    const std::vector<absl::Status> results = RunShmProcesses(
        2,
        [](Communicator& comm) -> absl::Status {
          if (auto s = comm.Barrier()->Wait(); !s.ok()) return s;
          if (comm.rank() == 0) std::raise(SIGKILL);  // Never receives.
          Tensor t = *Tensor::Zeros({1 << 20}, DType::kF32);
          const absl::Status s = comm.Broadcast(t, 1)->Wait();
          if (s.ok()) return absl::InternalError("the broadcast completed although its receiver was killed");
          if (s.code() == absl::StatusCode::kDeadlineExceeded || !Contains(s, "rank 0 (shm, pid ")) {
            return absl::InternalError(absl::StrCat("error does not name rank 0 and its pid in time: ", s.ToString()));
          }
          return absl::OkStatus();
        },
        SingleCopy(4096), /*deadline_seconds=*/60);
    ASSERT_EQ(results.size(), 2u);
    EXPECT_TRUE(Contains(results[0], "signal 9")) << results[0];
    EXPECT_TRUE(results[1].ok()) << results[1];
  }
  {
    SCOPED_TRACE("a receiver copying from a sender that is killed");
    const std::vector<absl::Status> results = RunShmProcesses(
        2,
        [](Communicator& comm) -> absl::Status {
          Tensor t = *Tensor::Zeros({16 << 20}, DType::kF32);
          if (auto s = comm.Barrier()->Wait(); !s.ok()) return s;
          std::shared_ptr<Work> work = comm.Broadcast(t, 1);
          if (comm.rank() == 1) {
            while (!work->IsCompleted()) std::raise(SIGKILL);
            return absl::InternalError("the 64 MiB broadcast completed before its root could die");
          }
          const absl::Status s = work->Wait();
          if (s.ok()) return absl::OkStatus();  // The root died after the last acknowledgement.
          if (s.code() == absl::StatusCode::kDeadlineExceeded || !Contains(s, "rank 1 (shm, pid ")) {
            return absl::InternalError(absl::StrCat("error does not name rank 1 and its pid in time: ", s.ToString()));
          }
          return absl::OkStatus();
        },
        SingleCopy(4096), /*deadline_seconds=*/60);
    ASSERT_EQ(results.size(), 2u);
    EXPECT_TRUE(results[0].ok()) << results[0];
    EXPECT_TRUE(Contains(results[1], "signal 9")) << results[1];
  }
  for (int n : {2, 3, 5}) {
    SCOPED_TRACE(absl::StrCat("the grid, single copy from 64 bytes, ", n, " processes"));
    const std::vector<absl::Status> results = RunShmProcesses(n, Grid, SingleCopy(64), /*deadline_seconds=*/120);
    for (size_t r = 0; r < results.size(); ++r) EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
  }
}

}  // namespace
}  // namespace lockstep
