#include "collectives/testing/fault_cases.h"

#include <csignal>
#include <memory>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace testing {
namespace {

bool Contains(const absl::Status& s, absl::string_view needle) {
  return s.message().find(needle) != absl::string_view::npos;
}

}  // namespace

absl::Status KilledRankCase(Communicator& comm, int victim, absl::string_view peer, const LargeOpFn& op) {
  // 64 MiB per rank: long enough to be mid-transfer when the victim dies.
  Tensor t = *Tensor::Zeros({16 << 20}, DType::kF32);
  const LargeOpFn start = op ? op : [&t](Communicator& c) { return c.AllReduce(t, ReduceOp::kSum); };
  if (absl::Status s = start(comm)->Wait(); !s.ok()) return s;  // Warm up.
  std::shared_ptr<Work> work = start(comm);
  if (comm.rank() == victim) {
    // Wait until the operation has started moving data, then die.
    while (!work->IsCompleted() && comm.broken_status().ok()) {
      std::raise(SIGKILL);
    }
  }
  absl::Status s = work->Wait();
  if (s.ok()) return absl::InternalError(absl::StrCat("the operation succeeded although rank ", victim, " was killed"));
  if (s.code() == absl::StatusCode::kDeadlineExceeded) {
    return absl::InternalError(absl::StrCat("the death was noticed only at the deadline: ", s.ToString()));
  }
  if (!Contains(s, peer)) {
    return absl::InternalError(absl::StrCat("the error does not name '", peer, "': ", s.ToString()));
  }
  // Later operations fail at once with the same cause.
  absl::Status later = comm.Barrier()->Wait();
  if (later.ok() || !Contains(later, absl::StrCat("rank ", victim))) {
    return absl::InternalError(absl::StrCat("a later op did not fail with the cause: ", later.ToString()));
  }
  return absl::OkStatus();
}

absl::Status MissingPeerCase(Communicator& comm, std::promise<void>& rank0_done, std::shared_future<void> done,
                             absl::string_view peer) {
  if (comm.rank() == 1) {
    done.wait();  // Alive, connected, but never joins the all-reduce.
    return absl::OkStatus();
  }
  Tensor t = *Tensor::Zeros({10}, DType::kF32);
  absl::Status s = comm.AllReduce(t, ReduceOp::kSum)->Wait();
  rank0_done.set_value();
  if (s.code() != absl::StatusCode::kDeadlineExceeded || !Contains(s, peer)) return absl::InternalError(s.ToString());
  return absl::OkStatus();
}

}  // namespace testing
}  // namespace lockstep
