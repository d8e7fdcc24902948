// TorchWork: a lockstep Work seen as PyTorch's c10d::Work, with the
// c10::ivalue::Future that DDP's reducer and comm hooks chain on.
//
//   std::shared_ptr<Work> mine = comm->AllReduce(view, ReduceOp::kSum);
//   c10::intrusive_ptr<c10d::Work> theirs =
//       TorchWork::Create(rank, c10d::OpType::ALLREDUCE, mine, {{tensor}}, /*finish=*/nullptr);
//   theirs->wait();  // throws the lockstep error as a RuntimeError
//
// `finish`, when given, runs once the lockstep work succeeded and before
// the c10d Work completes (copying results into non-contiguous outputs,
// unpacking lists); its error is the Work's. The future's value is what
// gloo's is: the output tensors (a list, or a list of lists when there are
// several), or the exception. The future completes, and its callbacks run,
// on the thread that completes the lockstep work, even when nobody holds
// the c10d Work any more (the reducer keeps only the future).
//
// wait() without a timeout lets the waiting thread run the communicator's
// queued operations itself, as lockstep's own Wait does (collectives/work.h);
// with a timeout it fails with "Operation timed out!" as c10d's does, the
// operation going on to its own deadline. abort() is refused: an
// operation ends by its deadline (the group's timeout).
#ifndef LOCKSTEP_INTEROP_TORCH_C10D_TORCH_WORK_H_
#define LOCKSTEP_INTEROP_TORCH_C10D_TORCH_WORK_H_

#include <ATen/core/ivalue.h>

#include <functional>
#include <memory>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "absl/status/status.h"
#include "collectives/work.h"

namespace lockstep {

class TorchWork final : public ::c10d::Work {
 public:
  // `profiling_title` ("lockstep:all_reduce"; a static string): the
  // operation shows in torch.profiler as an async event of that name, with
  // `inputs`' shapes, from the call to completion (as gloo's do).
  static c10::intrusive_ptr<TorchWork> Create(int rank, ::c10d::OpType type, std::shared_ptr<lockstep::Work> work,
                                              std::vector<std::vector<at::Tensor>> outputs,
                                              std::function<absl::Status()> finish,
                                              const char* profiling_title = nullptr,
                                              const std::vector<at::Tensor>& inputs = {});

  bool wait(std::chrono::milliseconds timeout = ::kNoTimeout) override;
  std::vector<at::Tensor> result() override;
  int sourceRank() const override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Use Create: the Work must be owned before completion can reach it.
  // `origin`: the operation; `last`: what completes it (origin, or origin
  // chained with finish).
  TorchWork(int rank, ::c10d::OpType type, std::shared_ptr<lockstep::Work> origin, std::shared_ptr<lockstep::Work> last,
            std::vector<std::vector<at::Tensor>> outputs, const char* profiling_title,
            const std::vector<at::Tensor>& inputs);

 private:
  void Done(const absl::Status& status);

  const std::shared_ptr<lockstep::Work> origin_;  // Its source rank.
  const std::shared_ptr<lockstep::Work> work_;
  const std::vector<std::vector<at::Tensor>> outputs_;
  const c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// A Status as the exception c10d's callers expect (a RuntimeError in
// Python); OK: none.
std::exception_ptr ExceptionOf(const absl::Status& status);

}  // namespace lockstep

#endif  // LOCKSTEP_INTEROP_TORCH_C10D_TORCH_WORK_H_
