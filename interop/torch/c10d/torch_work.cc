#include "interop/torch/c10d/torch_work.h"

#include <ATen/core/jit_type.h>

#include <stdexcept>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

c10::TypePtr FutureType(const std::vector<std::vector<at::Tensor>>& outputs) {
  if (outputs.size() > 1) return c10::ListType::create(c10::ListType::create(c10::TensorType::get()));
  return c10::ListType::create(c10::TensorType::get());
}

}  // namespace

std::exception_ptr ExceptionOf(const absl::Status& status) {
  if (status.ok()) return nullptr;
  return std::make_exception_ptr(std::runtime_error(std::string(status.message())));
}

TorchWork::TorchWork(int rank, ::c10d::OpType type, std::shared_ptr<lockstep::Work> origin,
                     std::shared_ptr<lockstep::Work> last, std::vector<std::vector<at::Tensor>> outputs,
                     const char* profiling_title, const std::vector<at::Tensor>& inputs)
    : ::c10d::Work(rank, type, profiling_title,
                   profiling_title == nullptr ? c10::optional<std::vector<at::Tensor>>() : inputs),
      origin_(std::move(origin)),
      work_(std::move(last)),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(FutureType(outputs_))) {}

c10::intrusive_ptr<TorchWork> TorchWork::Create(int rank, ::c10d::OpType type, std::shared_ptr<lockstep::Work> work,
                                                std::vector<std::vector<at::Tensor>> outputs,
                                                std::function<absl::Status()> finish, const char* profiling_title,
                                                const std::vector<at::Tensor>& inputs) {
  std::shared_ptr<lockstep::Work> last = finish ? work->Then(std::move(finish)) : work;
  auto torch_work =
      c10::make_intrusive<TorchWork>(rank, type, std::move(work), last, std::move(outputs), profiling_title, inputs);
  // The callback owns the Work until it ran: a caller that keeps only the
  // future (DDP's reducer) still gets it completed.
  last->WhenDone([self = torch_work](const absl::Status& status) { self->Done(status); });
  return torch_work;
}

void TorchWork::Done(const absl::Status& status) {
  // gloo's order: the future (and the callbacks chained on it, a comm
  // hook's or Python's then()) completes first, then the c10d Work, so
  // wait() returns after the future's callbacks ran.
  std::exception_ptr error = ExceptionOf(status);
  if (error) {
    future_->setError(error);
  } else if (outputs_.empty()) {
    future_->markCompleted(c10::IValue(std::vector<at::Tensor>()));
  } else if (outputs_.size() > 1) {
    future_->markCompleted(c10::IValue(outputs_));
  } else {
    future_->markCompleted(c10::IValue(outputs_[0]));
  }
  finish(error);
}

bool TorchWork::wait(std::chrono::milliseconds timeout) {
  // The lockstep Work first: once it is done, its callbacks (Done, and the
  // reference to this Work they held) are gone from the communicator's
  // thread (collectives/work.h), so nothing the caller may drop next, a
  // tensor Python owns, is freed there. Without a timeout the waiting
  // thread may also run the queued operations itself (no thread hand-off
  // for small ones). With one, c10d's wait below raises "Operation timed
  // out!" if it is still running.
  if (timeout == ::kNoTimeout) {
    work_->Wait().IgnoreError();
    return ::c10d::Work::wait(timeout);
  }
  if (!work_->Wait(timeout).ok() && !work_->IsCompleted()) {
    return ::c10d::Work::wait(std::chrono::milliseconds(1));
  }
  return ::c10d::Work::wait(timeout);
}

std::vector<at::Tensor> TorchWork::result() {
  TORCH_CHECK(outputs_.size() <= 1, "lockstep: this work's result is a list of lists: use getFuture().value()");
  return outputs_.empty() ? std::vector<at::Tensor>() : outputs_[0];
}

int TorchWork::sourceRank() const {
  TORCH_CHECK(opType_ == ::c10d::OpType::RECV || opType_ == ::c10d::OpType::RECVANYSOURCE,
              "sourceRank() may only be called on work objects that correspond to a recv or recv-from-any call");
  return origin_->source_rank();
}

void TorchWork::abort() {
  TORCH_CHECK(false,
              "lockstep: a work cannot be aborted; it ends by the group's timeout (init_process_group's "
              "timeout), failing every rank that waits on it");
}

c10::intrusive_ptr<c10::ivalue::Future> TorchWork::getFuture() { return future_; }

}  // namespace lockstep
