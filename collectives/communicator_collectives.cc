// The Communicator's collectives on tensors: argument checks, then one
// queued task that runs the backend's operation (collectives/communicator.h).
//
// Tasks capture tensors with init-captures (`input = input`): a plain
// capture of a `const Tensor&` makes a const member, which every move of the
// task then copies (a shape allocation and a reference count each).
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/communicator.h"
#include "collectives/internal/communicator_checks.h"
#include "collectives/internal/task_work.h"
#include "core/dtype.h"
#include "core/status.h"

namespace lockstep {

using communicator_internal::CheckKin;
using communicator_internal::CheckNumel;
using communicator_internal::CheckSame;
using communicator_internal::CheckTensor;
using communicator_internal::LayoutHash;
using communicator_internal::SumOf;

absl::Status Communicator::CheckReduceOp(ReduceOp reduce_op, DType dtype, const char* op) const {
  if (!IsValidReduceOp(static_cast<uint8_t>(reduce_op))) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": invalid reduce op ", static_cast<int>(reduce_op)));
  }
  if (IsBitwise(reduce_op)) {
    if (!IsIntegral(dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", ReduceOpName(reduce_op),
                                                     " applies to integer and bool tensors, not ", DTypeName(dtype)));
    }
    if (!capabilities_.bitwise_reductions) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": the ", capabilities_.name, " backend has no ",
                                                     ReduceOpName(reduce_op),
                                                     " reduction; run it on a communicator of the host backend"));
    }
  }
  if (reduce_op == ReduceOp::kAvg && dtype == DType::kBool) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": AVG has no meaning for bool tensors; use SUM (or) or PROD (and)"));
  }
  return absl::OkStatus();
}

absl::Status Communicator::CheckCounts(absl::Span<const int64_t> counts, const char* op, const char* what) const {
  if (static_cast<int>(counts.size()) != size_) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", what, " has ", counts.size(), " entries; it needs one per rank (world size ", size_, ")"));
  }
  for (int r = 0; r < size_; ++r) {
    // 2^48 elements bound the sum far from overflow, and no tensor is larger.
    if (counts[r] < 0 || counts[r] > (int64_t{1} << 48)) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": ", what, "[", r, "] is ", counts[r], "; element counts must be in [0, 2^48]"));
    }
  }
  return absl::OkStatus();
}

std::shared_ptr<Work> Communicator::AllReduce(const Tensor& tensor, ReduceOp op) {
  // In place, the common case (torch.distributed's form): one tensor's
  // checks, and one tensor captured, not two (each copy of a Tensor
  // allocates its shape).
  if (auto s = CheckTensor(tensor, "AllReduce", "tensor"); !s.ok()) return Failed(s);
  if (auto s = CheckDevice(tensor, "AllReduce", "tensor"); !s.ok()) return Failed(s);
  if (auto s = CheckReduceOp(op, tensor.dtype(), "AllReduce"); !s.ok()) return Failed(s);
  Fingerprint f{0, static_cast<uint8_t>(OpType::kAllReduce), static_cast<uint8_t>(tensor.dtype()),
                static_cast<uint8_t>(op), 0, -1, tensor.numel(), 0, 0};
  return Enqueue(f, [this, tensor = tensor, op](const OpContext& ctx) {
    return backend_->AllReduce(tensor, tensor, op, ctx);
  });
}

std::shared_ptr<Work> Communicator::AllReduce(const Tensor& input, const Tensor& output, ReduceOp op) {
  if (&input == &output) return AllReduce(input, op);
  if (auto s = CheckTensor(input, "AllReduce", "input"); !s.ok()) return Failed(s);
  if (auto s = CheckTensor(output, "AllReduce", "output"); !s.ok()) return Failed(s);
  if (auto s = CheckSame(input, output, "AllReduce", 1, "input", "output"); !s.ok()) return Failed(s);
  if (auto s = CheckDevice(input, "AllReduce", "input"); !s.ok()) return Failed(s);
  if (auto s = CheckReduceOp(op, input.dtype(), "AllReduce"); !s.ok()) return Failed(s);
  Fingerprint f{0, static_cast<uint8_t>(OpType::kAllReduce), static_cast<uint8_t>(input.dtype()),
                static_cast<uint8_t>(op), 0, -1, input.numel(), 0, 0};
  if (output.SharesStorageWith(input) && output.raw_data() == input.raw_data()) {
    // In place: one tensor captured, as above.
    return Enqueue(f, [this, tensor = input, op](const OpContext& ctx) {
      return backend_->AllReduce(tensor, tensor, op, ctx);
    });
  }
  return Enqueue(f, [this, input = input, output = output, op](const OpContext& ctx) {
    return backend_->AllReduce(input, output, op, ctx);
  });
}

std::shared_ptr<Work> Communicator::Reduce(const Tensor& input, const Tensor& output, ReduceOp op, int root) {
  if (root < 0 || root >= size_) {
    return Failed(absl::InvalidArgumentError(absl::StrCat("Reduce: root ", root, " is not a rank (world size ", size_, ")")));
  }
  if (auto s = CheckTensor(input, "Reduce", "input"); !s.ok()) return Failed(s);
  if (rank_ == root) {
    if (auto s = CheckTensor(output, "Reduce", "output (at the root)"); !s.ok()) return Failed(s);
    if (auto s = CheckSame(input, output, "Reduce", 1, "input", "output"); !s.ok()) return Failed(s);
  }
  if (auto s = CheckDevice(input, "Reduce", "input"); !s.ok()) return Failed(s);
  if (auto s = CheckReduceOp(op, input.dtype(), "Reduce"); !s.ok()) return Failed(s);
  Fingerprint f{0, static_cast<uint8_t>(OpType::kReduce), static_cast<uint8_t>(input.dtype()),
                static_cast<uint8_t>(op), 0, root, input.numel(), 0, 0};
  return Enqueue(f, [this, input = input, output = output, op, root](const OpContext& ctx) {
    return backend_->Reduce(input, output, op, root, ctx);
  });
}

std::shared_ptr<Work> Communicator::Broadcast(const Tensor& tensor, int root) {
  if (root < 0 || root >= size_) {
    return Failed(absl::InvalidArgumentError(absl::StrCat("Broadcast: root ", root, " is not a rank (world size ", size_, ")")));
  }
  if (auto s = CheckTensor(tensor, "Broadcast", "tensor"); !s.ok()) return Failed(s);
  if (auto s = CheckDevice(tensor, "Broadcast", "tensor"); !s.ok()) return Failed(s);
  Fingerprint f{0, static_cast<uint8_t>(OpType::kBroadcast), static_cast<uint8_t>(tensor.dtype()), 0, 0, root,
                tensor.numel(), 0, 0};
  return Enqueue(f, [this, tensor = tensor, root](const OpContext& ctx) {
    return backend_->Broadcast(tensor, root, ctx);
  });
}

std::shared_ptr<Work> Communicator::AllGather(const Tensor& input, const Tensor& output) {
  if (auto s = CheckTensor(input, "AllGather", "input"); !s.ok()) return Failed(s);
  if (auto s = CheckTensor(output, "AllGather", "output"); !s.ok()) return Failed(s);
  if (auto s = CheckSame(input, output, "AllGather", size_, "input", "output"); !s.ok()) return Failed(s);
  if (auto s = CheckDevice(input, "AllGather", "input"); !s.ok()) return Failed(s);
  Fingerprint f{0, static_cast<uint8_t>(OpType::kAllGather), static_cast<uint8_t>(input.dtype()), 0, 0, -1,
                input.numel(), 0, 0};
  return Enqueue(f, [this, input = input, output = output](const OpContext& ctx) {
    return backend_->AllGather(input, output, ctx);
  });
}

std::shared_ptr<Work> Communicator::Gather(const Tensor& input, const Tensor& output, int root) {
  if (root < 0 || root >= size_) {
    return Failed(absl::InvalidArgumentError(absl::StrCat("Gather: root ", root, " is not a rank (world size ", size_, ")")));
  }
  if (auto s = CheckTensor(input, "Gather", "input"); !s.ok()) return Failed(s);
  if (rank_ == root) {
    if (auto s = CheckTensor(output, "Gather", "output (at the root)"); !s.ok()) return Failed(s);
    if (auto s = CheckSame(input, output, "Gather", size_, "input", "output"); !s.ok()) return Failed(s);
  }
  if (auto s = CheckDevice(input, "Gather", "input"); !s.ok()) return Failed(s);
  Fingerprint f{0, static_cast<uint8_t>(OpType::kGather), static_cast<uint8_t>(input.dtype()), 0, 0, root,
                input.numel(), 0, 0};
  return Enqueue(f, [this, input = input, output = output, root](const OpContext& ctx) {
    return backend_->Gather(input, output, root, ctx);
  });
}

std::shared_ptr<Work> Communicator::Scatter(const Tensor& input, const Tensor& output, int root) {
  if (root < 0 || root >= size_) {
    return Failed(absl::InvalidArgumentError(absl::StrCat("Scatter: root ", root, " is not a rank (world size ", size_, ")")));
  }
  if (auto s = CheckTensor(output, "Scatter", "output"); !s.ok()) return Failed(s);
  if (rank_ == root) {
    if (auto s = CheckTensor(input, "Scatter", "input (at the root)"); !s.ok()) return Failed(s);
    if (auto s = CheckSame(output, input, "Scatter", size_, "output", "input"); !s.ok()) return Failed(s);
  }
  if (auto s = CheckDevice(output, "Scatter", "output"); !s.ok()) return Failed(s);
  Fingerprint f{0, static_cast<uint8_t>(OpType::kScatter), static_cast<uint8_t>(output.dtype()), 0, 0, root,
                output.numel(), 0, 0};
  return Enqueue(f, [this, input = input, output = output, root](const OpContext& ctx) {
    return backend_->Scatter(input, output, root, ctx);
  });
}

std::shared_ptr<Work> Communicator::ReduceScatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  if (auto s = CheckTensor(input, "ReduceScatter", "input"); !s.ok()) return Failed(s);
  if (auto s = CheckTensor(output, "ReduceScatter", "output"); !s.ok()) return Failed(s);
  if (auto s = CheckSame(output, input, "ReduceScatter", size_, "output", "input"); !s.ok()) return Failed(s);
  if (auto s = CheckDevice(input, "ReduceScatter", "input"); !s.ok()) return Failed(s);
  if (auto s = CheckReduceOp(op, input.dtype(), "ReduceScatter"); !s.ok()) return Failed(s);
  Fingerprint f{0, static_cast<uint8_t>(OpType::kReduceScatter), static_cast<uint8_t>(input.dtype()),
                static_cast<uint8_t>(op), 0, -1, input.numel(), 0, 0};
  return Enqueue(f, [this, input = input, output = output, op](const OpContext& ctx) {
    return backend_->ReduceScatter(input, output, op, ctx);
  });
}

std::shared_ptr<Work> Communicator::Barrier() {
  Fingerprint f{0, static_cast<uint8_t>(OpType::kBarrier), 0, 0, 0, -1, 0, 0, 0};
  return Enqueue(f, [this](const OpContext& ctx) { return backend_->Barrier(ctx); });
}

std::shared_ptr<Work> Communicator::AllGatherV(const Tensor& input, const Tensor& output,
                                               absl::Span<const int64_t> counts) {
  constexpr const char* kOp = "AllGatherV";
  if (auto s = CheckCounts(counts, kOp, "counts"); !s.ok()) return Failed(s);
  if (auto s = CheckTensor(input, kOp, "input"); !s.ok()) return Failed(s);
  if (auto s = CheckTensor(output, kOp, "output"); !s.ok()) return Failed(s);
  if (auto s = CheckKin(input, output, kOp, "input", "output"); !s.ok()) return Failed(s);
  if (auto s = CheckNumel(input, counts[rank_], kOp, "input", absl::StrCat("counts[", rank_, "]")); !s.ok()) {
    return Failed(s);
  }
  if (auto s = CheckNumel(output, SumOf(counts), kOp, "output", "the sum of counts"); !s.ok()) return Failed(s);
  if (auto s = CheckDevice(input, kOp, "input"); !s.ok()) return Failed(s);
  Fingerprint f{0, static_cast<uint8_t>(OpType::kAllGatherV), static_cast<uint8_t>(input.dtype()), 0, 0, -1,
                output.numel(), 0, LayoutHash(counts)};
  return Enqueue(f, [this, input = input, output = output, counts = std::vector<int64_t>(counts.begin(), counts.end())](
                        const OpContext& ctx) { return backend_->AllGatherV(input, output, counts, ctx); });
}

std::shared_ptr<Work> Communicator::ReduceScatterV(const Tensor& input, const Tensor& output,
                                                   absl::Span<const int64_t> counts, ReduceOp op) {
  constexpr const char* kOp = "ReduceScatterV";
  if (auto s = CheckCounts(counts, kOp, "counts"); !s.ok()) return Failed(s);
  if (auto s = CheckTensor(input, kOp, "input"); !s.ok()) return Failed(s);
  if (auto s = CheckTensor(output, kOp, "output"); !s.ok()) return Failed(s);
  if (auto s = CheckKin(input, output, kOp, "input", "output"); !s.ok()) return Failed(s);
  if (auto s = CheckNumel(input, SumOf(counts), kOp, "input", "the sum of counts"); !s.ok()) return Failed(s);
  if (auto s = CheckNumel(output, counts[rank_], kOp, "output", absl::StrCat("counts[", rank_, "]")); !s.ok()) {
    return Failed(s);
  }
  if (auto s = CheckDevice(input, kOp, "input"); !s.ok()) return Failed(s);
  if (auto s = CheckReduceOp(op, input.dtype(), kOp); !s.ok()) return Failed(s);
  Fingerprint f{0, static_cast<uint8_t>(OpType::kReduceScatterV), static_cast<uint8_t>(input.dtype()),
                static_cast<uint8_t>(op), 0, -1, input.numel(), 0, LayoutHash(counts)};
  return Enqueue(f, [this, input = input, output = output, op, counts = std::vector<int64_t>(counts.begin(), counts.end())](
                        const OpContext& ctx) { return backend_->ReduceScatterV(input, output, counts, op, ctx); });
}

std::shared_ptr<Work> Communicator::GatherV(const Tensor& input, const Tensor& output,
                                            absl::Span<const int64_t> counts, int root) {
  constexpr const char* kOp = "GatherV";
  if (root < 0 || root >= size_) {
    return Failed(absl::InvalidArgumentError(absl::StrCat(kOp, ": root ", root, " is not a rank (world size ", size_, ")")));
  }
  if (auto s = CheckCounts(counts, kOp, "counts"); !s.ok()) return Failed(s);
  if (auto s = CheckTensor(input, kOp, "input"); !s.ok()) return Failed(s);
  if (auto s = CheckNumel(input, counts[rank_], kOp, "input", absl::StrCat("counts[", rank_, "]")); !s.ok()) {
    return Failed(s);
  }
  if (rank_ == root) {
    if (auto s = CheckTensor(output, kOp, "output (at the root)"); !s.ok()) return Failed(s);
    if (auto s = CheckKin(input, output, kOp, "input", "output"); !s.ok()) return Failed(s);
    if (auto s = CheckNumel(output, SumOf(counts), kOp, "output", "the sum of counts"); !s.ok()) return Failed(s);
  }
  if (auto s = CheckDevice(input, kOp, "input"); !s.ok()) return Failed(s);
  Fingerprint f{0, static_cast<uint8_t>(OpType::kGatherV), static_cast<uint8_t>(input.dtype()), 0, 0, root,
                SumOf(counts), 0, LayoutHash(counts)};
  return Enqueue(f, [this, input = input, output = output, root, counts = std::vector<int64_t>(counts.begin(), counts.end())](
                        const OpContext& ctx) { return backend_->GatherV(input, output, counts, root, ctx); });
}

std::shared_ptr<Work> Communicator::ScatterV(const Tensor& input, const Tensor& output,
                                             absl::Span<const int64_t> counts, int root) {
  constexpr const char* kOp = "ScatterV";
  if (root < 0 || root >= size_) {
    return Failed(absl::InvalidArgumentError(absl::StrCat(kOp, ": root ", root, " is not a rank (world size ", size_, ")")));
  }
  if (auto s = CheckCounts(counts, kOp, "counts"); !s.ok()) return Failed(s);
  if (auto s = CheckTensor(output, kOp, "output"); !s.ok()) return Failed(s);
  if (auto s = CheckNumel(output, counts[rank_], kOp, "output", absl::StrCat("counts[", rank_, "]")); !s.ok()) {
    return Failed(s);
  }
  if (rank_ == root) {
    if (auto s = CheckTensor(input, kOp, "input (at the root)"); !s.ok()) return Failed(s);
    if (auto s = CheckKin(output, input, kOp, "output", "input"); !s.ok()) return Failed(s);
    if (auto s = CheckNumel(input, SumOf(counts), kOp, "input", "the sum of counts"); !s.ok()) return Failed(s);
  }
  if (auto s = CheckDevice(output, kOp, "output"); !s.ok()) return Failed(s);
  Fingerprint f{0, static_cast<uint8_t>(OpType::kScatterV), static_cast<uint8_t>(output.dtype()), 0, 0, root,
                SumOf(counts), 0, LayoutHash(counts)};
  return Enqueue(f, [this, input = input, output = output, root, counts = std::vector<int64_t>(counts.begin(), counts.end())](
                        const OpContext& ctx) { return backend_->ScatterV(input, output, counts, root, ctx); });
}

std::shared_ptr<Work> Communicator::AllToAll(const Tensor& input, const Tensor& output) {
  constexpr const char* kOp = "AllToAll";
  if (auto s = CheckTensor(input, kOp, "input"); !s.ok()) return Failed(s);
  if (auto s = CheckTensor(output, kOp, "output"); !s.ok()) return Failed(s);
  if (input.numel() % size_ != 0) {
    return Failed(absl::InvalidArgumentError(absl::StrCat(kOp, ": input has ", input.numel(),
                                                          " elements, not a multiple of the world size ", size_,
                                                          "; use AllToAllV for blocks of different sizes")));
  }
  const std::vector<int64_t> counts(static_cast<size_t>(size_), input.numel() / size_);
  return AllToAllImpl(input, output, counts, counts, /*even=*/true);
}

std::shared_ptr<Work> Communicator::AllToAllV(const Tensor& input, const Tensor& output,
                                              absl::Span<const int64_t> send_counts,
                                              absl::Span<const int64_t> recv_counts) {
  return AllToAllImpl(input, output, send_counts, recv_counts, /*even=*/false);
}

std::shared_ptr<Work> Communicator::AllToAllImpl(const Tensor& input, const Tensor& output,
                                                 absl::Span<const int64_t> send_counts,
                                                 absl::Span<const int64_t> recv_counts, bool even) {
  const char* kOp = even ? "AllToAll" : "AllToAllV";
  if (auto s = CheckCounts(send_counts, kOp, "send_counts"); !s.ok()) return Failed(s);
  if (auto s = CheckCounts(recv_counts, kOp, "recv_counts"); !s.ok()) return Failed(s);
  if (auto s = CheckTensor(input, kOp, "input"); !s.ok()) return Failed(s);
  if (auto s = CheckTensor(output, kOp, "output"); !s.ok()) return Failed(s);
  if (auto s = CheckKin(input, output, kOp, "input", "output"); !s.ok()) return Failed(s);
  if (auto s = CheckNumel(input, SumOf(send_counts), kOp, "input", "the sum of send_counts"); !s.ok()) return Failed(s);
  if (auto s = CheckNumel(output, SumOf(recv_counts), kOp, "output", "the sum of recv_counts"); !s.ok()) {
    return Failed(s);
  }
  if (send_counts[rank_] != recv_counts[rank_]) {
    return Failed(absl::InvalidArgumentError(absl::StrCat(kOp, ": rank ", rank_, " sends itself send_counts[", rank_,
                                                          "] = ", send_counts[rank_], " elements but expects recv_counts[",
                                                          rank_, "] = ", recv_counts[rank_])));
  }
  if (input.Overlaps(output) && input.numel() > 0 && output.numel() > 0) {
    return Failed(absl::InvalidArgumentError(
        absl::StrCat(kOp, ": input and output overlap; all-to-all needs a separate output tensor")));
  }
  if (auto s = CheckDevice(input, kOp, "input"); !s.ok()) return Failed(s);
  // Uneven counts differ from rank to rank (only each pair's must agree,
  // which the transport checks per message): the fingerprint of AllToAllV
  // carries no count; AllToAll's carries the element count every rank shares.
  Fingerprint f{0, static_cast<uint8_t>(even ? OpType::kAllToAll : OpType::kAllToAllV),
                static_cast<uint8_t>(input.dtype()), 0, 0, -1, even ? input.numel() : 0, 0, 0};
  return Enqueue(f, [this, input = input, output = output,
                     send = std::vector<int64_t>(send_counts.begin(), send_counts.end()),
                     recv = std::vector<int64_t>(recv_counts.begin(), recv_counts.end())](const OpContext& ctx) {
    return backend_->AllToAll(input, output, send, recv, ctx);
  });
}

}  // namespace lockstep
