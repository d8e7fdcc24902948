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
#include "collectives/communicator_state.h"
#include "collectives/internal/communicator_checks.h"
#include "core/dtype.h"
#include "core/status.h"

namespace lockstep {

using communicator_internal::CheckKin;
using communicator_internal::CheckNumel;
using communicator_internal::CheckSame;
using communicator_internal::CheckTensor;
using communicator_internal::CommunicatorState;
using communicator_internal::Fingerprint;
using communicator_internal::LayoutHash;
using communicator_internal::OpType;
using communicator_internal::SumOf;

std::shared_ptr<Work> Communicator::AllReduce(const Tensor& tensor, ReduceOp op) {
  CommunicatorState& st = *state_;
  // In place, the common case (torch.distributed's form): one tensor's
  // checks, and one tensor captured, not two (each copy of a Tensor
  // allocates its shape).
  if (auto s = CheckTensor(tensor, "AllReduce", "tensor"); !s.ok()) return st.Failed(s);
  if (auto s = st.CheckDevice(tensor, "AllReduce", "tensor"); !s.ok()) return st.Failed(s);
  if (auto s = st.CheckReduceOp(op, tensor.dtype(), "AllReduce"); !s.ok()) return st.Failed(s);
  Fingerprint f{0,
                static_cast<uint8_t>(OpType::kAllReduce),
                static_cast<uint8_t>(tensor.dtype()),
                static_cast<uint8_t>(op),
                0,
                -1,
                tensor.numel(),
                0,
                0};
  return st.Enqueue(f, [b = st.backend.get(), tensor = tensor, op](const OpContext& ctx) {
    return b->AllReduce(tensor, tensor, op, ctx);
  });
}

std::shared_ptr<Work> Communicator::AllReduce(const Tensor& input, const Tensor& output, ReduceOp op) {
  CommunicatorState& st = *state_;
  if (&input == &output) return AllReduce(input, op);
  if (auto s = CheckTensor(input, "AllReduce", "input"); !s.ok()) return st.Failed(s);
  if (auto s = CheckTensor(output, "AllReduce", "output"); !s.ok()) return st.Failed(s);
  if (auto s = CheckSame(input, output, "AllReduce", 1, "input", "output"); !s.ok()) return st.Failed(s);
  if (auto s = st.CheckDevice(input, "AllReduce", "input"); !s.ok()) return st.Failed(s);
  if (auto s = st.CheckReduceOp(op, input.dtype(), "AllReduce"); !s.ok()) return st.Failed(s);
  Fingerprint f{0,
                static_cast<uint8_t>(OpType::kAllReduce),
                static_cast<uint8_t>(input.dtype()),
                static_cast<uint8_t>(op),
                0,
                -1,
                input.numel(),
                0,
                0};
  if (output.SharesStorageWith(input) && output.raw_data() == input.raw_data()) {
    // In place: one tensor captured, as above.
    return st.Enqueue(f, [b = st.backend.get(), tensor = input, op](const OpContext& ctx) {
      return b->AllReduce(tensor, tensor, op, ctx);
    });
  }
  return st.Enqueue(f, [b = st.backend.get(), input = input, output = output, op](const OpContext& ctx) {
    return b->AllReduce(input, output, op, ctx);
  });
}

std::shared_ptr<Work> Communicator::Reduce(const Tensor& input, const Tensor& output, ReduceOp op, int root) {
  CommunicatorState& st = *state_;
  if (root < 0 || root >= st.size) {
    return st.Failed(
        absl::InvalidArgumentError(absl::StrCat("Reduce: root ", root, " is not a rank (world size ", st.size, ")")));
  }
  if (auto s = CheckTensor(input, "Reduce", "input"); !s.ok()) return st.Failed(s);
  if (st.rank == root) {
    if (auto s = CheckTensor(output, "Reduce", "output (at the root)"); !s.ok()) return st.Failed(s);
    if (auto s = CheckSame(input, output, "Reduce", 1, "input", "output"); !s.ok()) return st.Failed(s);
  }
  if (auto s = st.CheckDevice(input, "Reduce", "input"); !s.ok()) return st.Failed(s);
  if (auto s = st.CheckReduceOp(op, input.dtype(), "Reduce"); !s.ok()) return st.Failed(s);
  Fingerprint f{0,
                static_cast<uint8_t>(OpType::kReduce),
                static_cast<uint8_t>(input.dtype()),
                static_cast<uint8_t>(op),
                0,
                root,
                input.numel(),
                0,
                0};
  return st.Enqueue(f, [b = st.backend.get(), input = input, output = output, op, root](const OpContext& ctx) {
    return b->Reduce(input, output, op, root, ctx);
  });
}

std::shared_ptr<Work> Communicator::Broadcast(const Tensor& tensor, int root) {
  CommunicatorState& st = *state_;
  if (root < 0 || root >= st.size) {
    return st.Failed(absl::InvalidArgumentError(
        absl::StrCat("Broadcast: root ", root, " is not a rank (world size ", st.size, ")")));
  }
  if (auto s = CheckTensor(tensor, "Broadcast", "tensor"); !s.ok()) return st.Failed(s);
  if (auto s = st.CheckDevice(tensor, "Broadcast", "tensor"); !s.ok()) return st.Failed(s);
  Fingerprint f{
      0, static_cast<uint8_t>(OpType::kBroadcast), static_cast<uint8_t>(tensor.dtype()), 0, 0, root, tensor.numel(), 0,
      0};
  return st.Enqueue(f, [b = st.backend.get(), tensor = tensor, root](const OpContext& ctx) {
    return b->Broadcast(tensor, root, ctx);
  });
}

std::shared_ptr<Work> Communicator::AllGather(const Tensor& input, const Tensor& output) {
  CommunicatorState& st = *state_;
  if (auto s = CheckTensor(input, "AllGather", "input"); !s.ok()) return st.Failed(s);
  if (auto s = CheckTensor(output, "AllGather", "output"); !s.ok()) return st.Failed(s);
  if (auto s = CheckSame(input, output, "AllGather", st.size, "input", "output"); !s.ok()) return st.Failed(s);
  if (auto s = st.CheckDevice(input, "AllGather", "input"); !s.ok()) return st.Failed(s);
  Fingerprint f{
      0, static_cast<uint8_t>(OpType::kAllGather), static_cast<uint8_t>(input.dtype()), 0, 0, -1, input.numel(), 0, 0};
  return st.Enqueue(f, [b = st.backend.get(), input = input, output = output](const OpContext& ctx) {
    return b->AllGather(input, output, ctx);
  });
}

std::shared_ptr<Work> Communicator::Gather(const Tensor& input, const Tensor& output, int root) {
  CommunicatorState& st = *state_;
  if (root < 0 || root >= st.size) {
    return st.Failed(
        absl::InvalidArgumentError(absl::StrCat("Gather: root ", root, " is not a rank (world size ", st.size, ")")));
  }
  if (auto s = CheckTensor(input, "Gather", "input"); !s.ok()) return st.Failed(s);
  if (st.rank == root) {
    if (auto s = CheckTensor(output, "Gather", "output (at the root)"); !s.ok()) return st.Failed(s);
    if (auto s = CheckSame(input, output, "Gather", st.size, "input", "output"); !s.ok()) return st.Failed(s);
  }
  if (auto s = st.CheckDevice(input, "Gather", "input"); !s.ok()) return st.Failed(s);
  Fingerprint f{
      0, static_cast<uint8_t>(OpType::kGather), static_cast<uint8_t>(input.dtype()), 0, 0, root, input.numel(), 0, 0};
  return st.Enqueue(f, [b = st.backend.get(), input = input, output = output, root](const OpContext& ctx) {
    return b->Gather(input, output, root, ctx);
  });
}

std::shared_ptr<Work> Communicator::Scatter(const Tensor& input, const Tensor& output, int root) {
  CommunicatorState& st = *state_;
  if (root < 0 || root >= st.size) {
    return st.Failed(
        absl::InvalidArgumentError(absl::StrCat("Scatter: root ", root, " is not a rank (world size ", st.size, ")")));
  }
  if (auto s = CheckTensor(output, "Scatter", "output"); !s.ok()) return st.Failed(s);
  if (st.rank == root) {
    if (auto s = CheckTensor(input, "Scatter", "input (at the root)"); !s.ok()) return st.Failed(s);
    if (auto s = CheckSame(output, input, "Scatter", st.size, "output", "input"); !s.ok()) return st.Failed(s);
  }
  if (auto s = st.CheckDevice(output, "Scatter", "output"); !s.ok()) return st.Failed(s);
  Fingerprint f{
      0, static_cast<uint8_t>(OpType::kScatter), static_cast<uint8_t>(output.dtype()), 0, 0, root, output.numel(), 0,
      0};
  return st.Enqueue(f, [b = st.backend.get(), input = input, output = output, root](const OpContext& ctx) {
    return b->Scatter(input, output, root, ctx);
  });
}

std::shared_ptr<Work> Communicator::ReduceScatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  CommunicatorState& st = *state_;
  if (auto s = CheckTensor(input, "ReduceScatter", "input"); !s.ok()) return st.Failed(s);
  if (auto s = CheckTensor(output, "ReduceScatter", "output"); !s.ok()) return st.Failed(s);
  if (auto s = CheckSame(output, input, "ReduceScatter", st.size, "output", "input"); !s.ok()) return st.Failed(s);
  if (auto s = st.CheckDevice(input, "ReduceScatter", "input"); !s.ok()) return st.Failed(s);
  if (auto s = st.CheckReduceOp(op, input.dtype(), "ReduceScatter"); !s.ok()) return st.Failed(s);
  Fingerprint f{0,
                static_cast<uint8_t>(OpType::kReduceScatter),
                static_cast<uint8_t>(input.dtype()),
                static_cast<uint8_t>(op),
                0,
                -1,
                input.numel(),
                0,
                0};
  return st.Enqueue(f, [b = st.backend.get(), input = input, output = output, op](const OpContext& ctx) {
    return b->ReduceScatter(input, output, op, ctx);
  });
}

std::shared_ptr<Work> Communicator::Barrier() {
  CommunicatorState& st = *state_;
  Fingerprint f{0, static_cast<uint8_t>(OpType::kBarrier), 0, 0, 0, -1, 0, 0, 0};
  return st.Enqueue(f, [b = st.backend.get()](const OpContext& ctx) { return b->Barrier(ctx); });
}

std::shared_ptr<Work> Communicator::AllGatherV(const Tensor& input, const Tensor& output,
                                               absl::Span<const int64_t> counts) {
  CommunicatorState& st = *state_;
  constexpr const char* kOp = "AllGatherV";
  if (auto s = st.CheckCounts(counts, kOp, "counts"); !s.ok()) return st.Failed(s);
  if (auto s = CheckTensor(input, kOp, "input"); !s.ok()) return st.Failed(s);
  if (auto s = CheckTensor(output, kOp, "output"); !s.ok()) return st.Failed(s);
  if (auto s = CheckKin(input, output, kOp, "input", "output"); !s.ok()) return st.Failed(s);
  if (auto s = CheckNumel(input, counts[st.rank], kOp, "input", absl::StrCat("counts[", st.rank, "]")); !s.ok()) {
    return st.Failed(s);
  }
  if (auto s = CheckNumel(output, SumOf(counts), kOp, "output", "the sum of counts"); !s.ok()) return st.Failed(s);
  if (auto s = st.CheckDevice(input, kOp, "input"); !s.ok()) return st.Failed(s);
  Fingerprint f{0,
                static_cast<uint8_t>(OpType::kAllGatherV),
                static_cast<uint8_t>(input.dtype()),
                0,
                0,
                -1,
                output.numel(),
                0,
                LayoutHash(counts)};
  return st.Enqueue(f, [b = st.backend.get(), input = input, output = output,
                        counts = std::vector<int64_t>(counts.begin(), counts.end())](const OpContext& ctx) {
    return b->AllGatherV(input, output, counts, ctx);
  });
}

std::shared_ptr<Work> Communicator::ReduceScatterV(const Tensor& input, const Tensor& output,
                                                   absl::Span<const int64_t> counts, ReduceOp op) {
  CommunicatorState& st = *state_;
  constexpr const char* kOp = "ReduceScatterV";
  if (auto s = st.CheckCounts(counts, kOp, "counts"); !s.ok()) return st.Failed(s);
  if (auto s = CheckTensor(input, kOp, "input"); !s.ok()) return st.Failed(s);
  if (auto s = CheckTensor(output, kOp, "output"); !s.ok()) return st.Failed(s);
  if (auto s = CheckKin(input, output, kOp, "input", "output"); !s.ok()) return st.Failed(s);
  if (auto s = CheckNumel(input, SumOf(counts), kOp, "input", "the sum of counts"); !s.ok()) return st.Failed(s);
  if (auto s = CheckNumel(output, counts[st.rank], kOp, "output", absl::StrCat("counts[", st.rank, "]")); !s.ok()) {
    return st.Failed(s);
  }
  if (auto s = st.CheckDevice(input, kOp, "input"); !s.ok()) return st.Failed(s);
  if (auto s = st.CheckReduceOp(op, input.dtype(), kOp); !s.ok()) return st.Failed(s);
  Fingerprint f{0,
                static_cast<uint8_t>(OpType::kReduceScatterV),
                static_cast<uint8_t>(input.dtype()),
                static_cast<uint8_t>(op),
                0,
                -1,
                input.numel(),
                0,
                LayoutHash(counts)};
  return st.Enqueue(f, [b = st.backend.get(), input = input, output = output, op,
                        counts = std::vector<int64_t>(counts.begin(), counts.end())](const OpContext& ctx) {
    return b->ReduceScatterV(input, output, counts, op, ctx);
  });
}

std::shared_ptr<Work> Communicator::GatherV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts,
                                            int root) {
  CommunicatorState& st = *state_;
  constexpr const char* kOp = "GatherV";
  if (root < 0 || root >= st.size) {
    return st.Failed(
        absl::InvalidArgumentError(absl::StrCat(kOp, ": root ", root, " is not a rank (world size ", st.size, ")")));
  }
  if (auto s = st.CheckCounts(counts, kOp, "counts"); !s.ok()) return st.Failed(s);
  if (auto s = CheckTensor(input, kOp, "input"); !s.ok()) return st.Failed(s);
  if (auto s = CheckNumel(input, counts[st.rank], kOp, "input", absl::StrCat("counts[", st.rank, "]")); !s.ok()) {
    return st.Failed(s);
  }
  if (st.rank == root) {
    if (auto s = CheckTensor(output, kOp, "output (at the root)"); !s.ok()) return st.Failed(s);
    if (auto s = CheckKin(input, output, kOp, "input", "output"); !s.ok()) return st.Failed(s);
    if (auto s = CheckNumel(output, SumOf(counts), kOp, "output", "the sum of counts"); !s.ok()) return st.Failed(s);
  }
  if (auto s = st.CheckDevice(input, kOp, "input"); !s.ok()) return st.Failed(s);
  Fingerprint f{0,
                static_cast<uint8_t>(OpType::kGatherV),
                static_cast<uint8_t>(input.dtype()),
                0,
                0,
                root,
                SumOf(counts),
                0,
                LayoutHash(counts)};
  return st.Enqueue(f, [b = st.backend.get(), input = input, output = output, root,
                        counts = std::vector<int64_t>(counts.begin(), counts.end())](const OpContext& ctx) {
    return b->GatherV(input, output, counts, root, ctx);
  });
}

std::shared_ptr<Work> Communicator::ScatterV(const Tensor& input, const Tensor& output,
                                             absl::Span<const int64_t> counts, int root) {
  CommunicatorState& st = *state_;
  constexpr const char* kOp = "ScatterV";
  if (root < 0 || root >= st.size) {
    return st.Failed(
        absl::InvalidArgumentError(absl::StrCat(kOp, ": root ", root, " is not a rank (world size ", st.size, ")")));
  }
  if (auto s = st.CheckCounts(counts, kOp, "counts"); !s.ok()) return st.Failed(s);
  if (auto s = CheckTensor(output, kOp, "output"); !s.ok()) return st.Failed(s);
  if (auto s = CheckNumel(output, counts[st.rank], kOp, "output", absl::StrCat("counts[", st.rank, "]")); !s.ok()) {
    return st.Failed(s);
  }
  if (st.rank == root) {
    if (auto s = CheckTensor(input, kOp, "input (at the root)"); !s.ok()) return st.Failed(s);
    if (auto s = CheckKin(output, input, kOp, "output", "input"); !s.ok()) return st.Failed(s);
    if (auto s = CheckNumel(input, SumOf(counts), kOp, "input", "the sum of counts"); !s.ok()) return st.Failed(s);
  }
  if (auto s = st.CheckDevice(output, kOp, "output"); !s.ok()) return st.Failed(s);
  Fingerprint f{0,
                static_cast<uint8_t>(OpType::kScatterV),
                static_cast<uint8_t>(output.dtype()),
                0,
                0,
                root,
                SumOf(counts),
                0,
                LayoutHash(counts)};
  return st.Enqueue(f, [b = st.backend.get(), input = input, output = output, root,
                        counts = std::vector<int64_t>(counts.begin(), counts.end())](const OpContext& ctx) {
    return b->ScatterV(input, output, counts, root, ctx);
  });
}

namespace {

std::shared_ptr<Work> AllToAllOf(CommunicatorState& st, const Tensor& input, const Tensor& output,
                                 absl::Span<const int64_t> send_counts, absl::Span<const int64_t> recv_counts,
                                 bool even) {
  const char* kOp = even ? "AllToAll" : "AllToAllV";
  if (auto s = st.CheckCounts(send_counts, kOp, "send_counts"); !s.ok()) return st.Failed(s);
  if (auto s = st.CheckCounts(recv_counts, kOp, "recv_counts"); !s.ok()) return st.Failed(s);
  if (auto s = CheckTensor(input, kOp, "input"); !s.ok()) return st.Failed(s);
  if (auto s = CheckTensor(output, kOp, "output"); !s.ok()) return st.Failed(s);
  if (auto s = CheckKin(input, output, kOp, "input", "output"); !s.ok()) return st.Failed(s);
  if (auto s = CheckNumel(input, SumOf(send_counts), kOp, "input", "the sum of send_counts"); !s.ok())
    return st.Failed(s);
  if (auto s = CheckNumel(output, SumOf(recv_counts), kOp, "output", "the sum of recv_counts"); !s.ok()) {
    return st.Failed(s);
  }
  if (send_counts[st.rank] != recv_counts[st.rank]) {
    return st.Failed(absl::InvalidArgumentError(
        absl::StrCat(kOp, ": rank ", st.rank, " sends itself send_counts[", st.rank, "] = ", send_counts[st.rank],
                     " elements but expects recv_counts[", st.rank, "] = ", recv_counts[st.rank])));
  }
  if (input.Overlaps(output) && input.numel() > 0 && output.numel() > 0) {
    return st.Failed(absl::InvalidArgumentError(
        absl::StrCat(kOp, ": input and output overlap; all-to-all needs a separate output tensor")));
  }
  if (auto s = st.CheckDevice(input, kOp, "input"); !s.ok()) return st.Failed(s);
  // Uneven counts differ from rank to rank (only each pair's must agree,
  // which the transport checks per message): the fingerprint of AllToAllV
  // carries no count; AllToAll's carries the element count every rank shares.
  Fingerprint f{0,
                static_cast<uint8_t>(even ? OpType::kAllToAll : OpType::kAllToAllV),
                static_cast<uint8_t>(input.dtype()),
                0,
                0,
                -1,
                even ? input.numel() : 0,
                0,
                0};
  return st.Enqueue(f,
                    [b = st.backend.get(), input = input, output = output,
                     send = std::vector<int64_t>(send_counts.begin(), send_counts.end()),
                     recv = std::vector<int64_t>(recv_counts.begin(), recv_counts.end()), even](const OpContext& ctx) {
                      OpContext with_shape = ctx;
                      with_shape.even_blocks = even;
                      return b->AllToAll(input, output, send, recv, with_shape);
                    });
}

}  // namespace

std::shared_ptr<Work> Communicator::AllToAll(const Tensor& input, const Tensor& output) {
  CommunicatorState& st = *state_;
  constexpr const char* kOp = "AllToAll";
  if (auto s = CheckTensor(input, kOp, "input"); !s.ok()) return st.Failed(s);
  if (auto s = CheckTensor(output, kOp, "output"); !s.ok()) return st.Failed(s);
  if (input.numel() % st.size != 0) {
    return st.Failed(absl::InvalidArgumentError(absl::StrCat(kOp, ": input has ", input.numel(),
                                                             " elements, not a multiple of the world size ", st.size,
                                                             "; use AllToAllV for blocks of different sizes")));
  }
  const std::vector<int64_t> counts(static_cast<size_t>(st.size), input.numel() / st.size);
  return AllToAllOf(st, input, output, counts, counts, /*even=*/true);
}

std::shared_ptr<Work> Communicator::AllToAllV(const Tensor& input, const Tensor& output,
                                              absl::Span<const int64_t> send_counts,
                                              absl::Span<const int64_t> recv_counts) {
  CommunicatorState& st = *state_;
  return AllToAllOf(st, input, output, send_counts, recv_counts, /*even=*/false);
}

}  // namespace lockstep
