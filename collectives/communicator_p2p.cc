// The Communicator's point-to-point operations (Send, Recv, RecvAnySource)
// and the batch that runs them: operations posted one after another, up to
// the next collective, progress together (collectives/communicator.h).
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/communicator.h"
#include "collectives/communicator_state.h"
#include "collectives/completable_work.h"
#include "collectives/internal/communicator_checks.h"
#include "core/deadline.h"

namespace lockstep {

using communicator_internal::CommunicatorState;
using communicator_internal::Fingerprint;
using communicator_internal::OpType;
using communicator_internal::QueuedOp;

namespace {

// On the wire a tag carries kPointToPointTagBit, and tags from 0xFFFFFF00
// up are the transports' own (abort): user tags stay below 2^31 - 256.
constexpr uint32_t kPointToPointTagLimit = 0x7FFFFF00u;

// The operations of one point-to-point batch: the first, then whatever is
// posted while it runs, up to the next collective.
class Batch : public PointToPointSource {
 public:
  Batch(CommunicatorState& state, QueuedOp first) : state_(state) { pending_.push_back(std::move(first)); }

  void Take(std::vector<PointToPointOp>* ops) override {
    state_.queue.TakePointToPoint(&pending_);
    for (; handed_ < pending_.size(); ++handed_) {
      QueuedOp& item = pending_[handed_];
      PointToPointOp op = std::move(*item.p2p);
      std::shared_ptr<CompletableWork> work = item.work;
      FlightRecorder* recorder = &state_.recorder;
      const uint64_t record = item.record = recorder->Start(RecordOf(item.fingerprint));
      if (op.send) {
        op.done = [work, recorder, record](int) {
          recorder->Finish(record, true);
          work->Complete(absl::OkStatus());
        };
      } else {
        op.done = [work, recorder, record](int source) {
          recorder->Finish(record, true);
          work->SetSourceRank(source);
          work->Complete(absl::OkStatus());
        };
      }
      ops->push_back(std::move(op));
    }
  }
  int wake_fd() const override { return state_.queue.wake_fd(); }

  // Fails every operation of the batch that has not finished.
  void Fail(const absl::Status& status) {
    for (QueuedOp& item : pending_) {
      state_.recorder.Finish(item.record, false);  // Ignored for those done.
      item.work->Complete(absl::Status(
          status.code(),
          absl::StrCat("rank ", state_.rank, ": ", Describe(item.fingerprint), " failed: ", status.message())));
    }
  }

 private:
  CommunicatorState& state_;
  std::deque<QueuedOp> pending_;  // Deque: items keep their addresses.
  size_t handed_ = 0;
};

}  // namespace

namespace communicator_internal {

void CommunicatorState::RunPointToPointBatch(QueuedOp first) {
  Batch batch(*this, std::move(first));
  queue.SetPointToPointRunning(true);
  absl::Status status = backend->RunPointToPoint(batch, DeadlineIn(options.timeout));
  queue.SetPointToPointRunning(false);
  if (!status.ok()) {
    status = Break(absl::Status(status.code(), absl::StrCat("point-to-point: ", status.message())));
    batch.Fail(status);  // Completed operations keep their OK status.
  }
}

}  // namespace communicator_internal

namespace {

std::shared_ptr<Work> EnqueuePointToPoint(CommunicatorState& s, int peer, uint32_t tag, bool send,
                                          const Tensor& tensor) {
  const bool any_source = !send && peer == PointToPointOp::kAnySource;
  const char* name = send ? "Send" : any_source ? "RecvAnySource" : "Recv";
  if (any_source && s.size == 1) {
    return s.Failed(absl::InvalidArgumentError(
        "RecvAnySource: this rank is alone in its group (world size 1), so no message can ever come"));
  }
  if (any_source && !s.capabilities.any_source_receive) {
    return s.Failed(absl::UnimplementedError(absl::StrCat(
        "RecvAnySource: the ", s.capabilities.name,
        " backend cannot receive from any rank (NCCL has no wildcard receive); name the sender with Recv")));
  }
  if (!any_source && (peer < 0 || peer >= s.size || peer == s.rank)) {
    return s.Failed(absl::InvalidArgumentError(
        absl::StrCat(name, ": peer ", peer, " is not another rank (this is rank ", s.rank, " of ", s.size, ")")));
  }
  if (tag >= kPointToPointTagLimit) {
    return s.Failed(absl::InvalidArgumentError(
        absl::StrCat(name, ": tag ", tag, " must be below ", kPointToPointTagLimit, " (2^31 - 256)")));
  }
  if (auto st = communicator_internal::CheckTensor(tensor, name, "tensor"); !st.ok()) return s.Failed(st);
  if (auto st = s.CheckDevice(tensor, name, "tensor"); !st.ok()) return s.Failed(st);
  if (!s.capabilities.point_to_point) {
    return s.Failed(absl::UnimplementedError(
        absl::StrCat(name, ": the ", s.capabilities.name, " backend has no point-to-point operations")));
  }
  std::shared_ptr<CompletableWork> work = s.queue.NewWork();
  const OpType type = send ? OpType::kSend : any_source ? OpType::kRecvAnySource : OpType::kRecv;
  // The queue numbers it (seq) as it takes it in.
  const Fingerprint fingerprint{
      0, static_cast<uint8_t>(type), static_cast<uint8_t>(tensor.dtype()), 0, 0, peer, tensor.numel(), tag, 0};
  auto p2p = std::make_unique<PointToPointOp>();
  p2p->send = send;
  p2p->peer = peer;
  p2p->tag = tag;
  p2p->tensor = tensor;
  s.queue.PushPointToPoint(work, fingerprint, std::move(p2p));
  return work;
}

}  // namespace

std::shared_ptr<Work> Communicator::Send(const Tensor& tensor, int dst, uint32_t tag) {
  return EnqueuePointToPoint(*state_, dst, tag, /*send=*/true, tensor);
}

std::shared_ptr<Work> Communicator::Recv(const Tensor& tensor, int src, uint32_t tag) {
  return EnqueuePointToPoint(*state_, src, tag, /*send=*/false, tensor);
}

std::shared_ptr<Work> Communicator::RecvAnySource(const Tensor& tensor, uint32_t tag) {
  return EnqueuePointToPoint(*state_, PointToPointOp::kAnySource, tag, /*send=*/false, tensor);
}

}  // namespace lockstep
