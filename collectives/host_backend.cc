#include "collectives/host_backend.h"

#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/algorithms/all_gather.h"
#include "collectives/algorithms/all_reduce.h"
#include "collectives/algorithms/all_to_all.h"
#include "collectives/algorithms/barrier.h"
#include "collectives/algorithms/broadcast.h"
#include "collectives/algorithms/gather.h"
#include "collectives/algorithms/reduce.h"
#include "collectives/algorithms/reduce_scatter.h"
#include "collectives/algorithms/scatter.h"
#include "core/status.h"

namespace lockstep {
namespace {

// A message tag outside the algorithms' step numbering.
constexpr uint32_t kFingerprintTag = 0xFFFFFFFFu;

absl::StatusOr<Tensor> Flat1d(const Tensor& t) { return t.Flat(0, t.numel()); }

// Staging slots: one per tensor an operation stages at once.
constexpr int kSlotA = 0;
constexpr int kSlotB = 1;

}  // namespace

absl::StatusOr<std::unique_ptr<HostBackend>> HostBackend::Create(std::unique_ptr<Transport> transport,
                                                                 AlgorithmOptions options, std::string transport_name) {
  if (transport == nullptr) return absl::InvalidArgumentError("HostBackend::Create: no transport");
  LOCKSTEP_RETURN_IF_ERROR(ValidateAlgorithmOptions(options));
  return std::unique_ptr<HostBackend>(new HostBackend(std::move(transport), options, std::move(transport_name)));
}

BackendCapabilities HostBackend::capabilities() const {
  BackendCapabilities c;
  c.name = transport_name_.empty() ? "host" : absl::StrCat("host over ", transport_name_);
  c.cpu_tensors = true;
  c.cuda_tensors = true;  // Staged through pinned host memory.
  c.point_to_point = true;
  c.bitwise_reductions = true;
  c.any_source_receive = true;
  return c;
}

AlgorithmContext HostBackend::Context(const OpContext& op_ctx, DType dtype) {
  AlgorithmContext ctx{*transport_, op_ctx.seq, 0, op_ctx.deadline, options_.segment_bytes, &scratch_};
  ctx.small_message_bytes = options_.small_message_bytes;
  ctx.all_reduce = options_.all_reduce;
  ctx.link = *options_.link;
  ctx.ranks_per_host = options_.ranks_per_host;
  ctx.ranks_per_core = options_.ranks_per_core;
  ctx.element = static_cast<uint8_t>(static_cast<int>(dtype) + 1);
  return ctx;
}

const char* HostBackend::AllReduceAlgorithm(int64_t count, DType dtype) const {
  return AllReduceAlgorithmName(ChooseAllReduce(options_.all_reduce, options_.small_message_bytes, *options_.link,
                                                static_cast<size_t>(count) * DTypeSize(dtype), count, size()));
}

absl::StatusOr<Tensor> HostBackend::Stage(const Tensor& t, int slot, bool copy_in) {
  if (t.device().is_cpu()) return Flat1d(t);
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor host, staging_.Get(slot, t.numel(), t.dtype()));
  if (copy_in) LOCKSTEP_RETURN_IF_ERROR(host.CopyFrom(t));
  return host;
}

namespace {
absl::Status Unstage(const Tensor& host, const Tensor& t) {
  if (t.device().is_cpu()) return absl::OkStatus();
  return t.CopyFrom(host);
}
}  // namespace

absl::Status HostBackend::AllReduce(const Tensor& input, const Tensor& output, ReduceOp op, const OpContext& op_ctx) {
  if (!output.SharesStorageWith(input) || output.raw_data() != input.raw_data()) {
    LOCKSTEP_RETURN_IF_ERROR(output.CopyFrom(input));
  }
  if (output.numel() == 0) return absl::OkStatus();
  AlgorithmContext ctx = Context(op_ctx, output.dtype());
  // A flat CPU tensor (buckets, most benchmarks) is the buffer itself: no
  // staged copy of the Tensor, which would allocate its shape.
  if (output.device().is_cpu() && output.dim() == 1) return lockstep::AllReduce(ctx, output, op);
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor buffer, Stage(output, kSlotA, true));
  LOCKSTEP_RETURN_IF_ERROR(lockstep::AllReduce(ctx, buffer, op));
  return Unstage(buffer, output);
}

absl::Status HostBackend::Reduce(const Tensor& input, const Tensor& output, ReduceOp op, int root,
                                 const OpContext& op_ctx) {
  if (input.numel() == 0) return absl::OkStatus();
  AlgorithmContext ctx = Context(op_ctx, input.dtype());
  // Out of place: the input is read, never copied (a CUDA one is staged).
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine, Stage(input, kSlotA, true));
  if (rank() != root) return ReduceTo(ctx, mine, Tensor(), op, root);
  if (output.device().is_cpu()) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor out, Flat1d(output));
    return ReduceTo(ctx, mine, out, op, root);
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor out, Stage(output, kSlotB, false));
  LOCKSTEP_RETURN_IF_ERROR(ReduceTo(ctx, mine, out, op, root));
  return Unstage(out, output);
}

absl::Status HostBackend::Broadcast(const Tensor& tensor, int root, const OpContext& op_ctx) {
  if (tensor.numel() == 0) return absl::OkStatus();
  const bool is_root = rank() == root;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor buffer, Stage(tensor, kSlotA, is_root));
  AlgorithmContext ctx = Context(op_ctx, tensor.dtype());
  LOCKSTEP_RETURN_IF_ERROR(BroadcastFrom(ctx, buffer, root));
  return is_root ? absl::OkStatus() : Unstage(buffer, tensor);
}

absl::Status HostBackend::AllGather(const Tensor& input, const Tensor& output, const OpContext& op_ctx) {
  if (input.numel() == 0) return absl::OkStatus();
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor buffer, Stage(output, kSlotA, false));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor own, buffer.Flat(rank() * input.numel(), input.numel()));
  LOCKSTEP_RETURN_IF_ERROR(own.CopyFrom(input));
  AlgorithmContext ctx = Context(op_ctx, input.dtype());
  LOCKSTEP_RETURN_IF_ERROR(lockstep::AllGather(ctx, buffer));
  return Unstage(buffer, output);
}

absl::Status HostBackend::Gather(const Tensor& input, const Tensor& output, int root, const OpContext& op_ctx) {
  if (input.numel() == 0) return absl::OkStatus();
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine, Stage(input, kSlotA, true));
  AlgorithmContext ctx = Context(op_ctx, input.dtype());
  if (rank() != root) return DirectGather(ctx, mine, Tensor(), root);
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor slots, Stage(output, kSlotB, false));
  LOCKSTEP_RETURN_IF_ERROR(DirectGather(ctx, mine, slots, root));
  return Unstage(slots, output);
}

absl::Status HostBackend::Scatter(const Tensor& input, const Tensor& output, int root, const OpContext& op_ctx) {
  if (output.numel() == 0) return absl::OkStatus();
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine, Stage(output, kSlotA, false));
  AlgorithmContext ctx = Context(op_ctx, output.dtype());
  if (rank() == root) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor slots, Stage(input, kSlotB, true));
    LOCKSTEP_RETURN_IF_ERROR(DirectScatter(ctx, slots, mine, root));
  } else {
    LOCKSTEP_RETURN_IF_ERROR(DirectScatter(ctx, Tensor(), mine, root));
  }
  return Unstage(mine, output);
}

absl::Status HostBackend::ReduceScatter(const Tensor& input, const Tensor& output, ReduceOp op,
                                        const OpContext& op_ctx) {
  if (output.numel() == 0) return absl::OkStatus();
  // The ring reads the input where it is (a CUDA one is staged) and writes
  // results into a reused buffer; only chunk r is copied out.
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor source, Stage(input, kSlotA, true));
  Scratch& results = input.device().is_cpu() ? results_ : staging_;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor buffer, results.Get(kSlotB, input.numel(), input.dtype()));
  AlgorithmContext ctx = Context(op_ctx, input.dtype());
  LOCKSTEP_RETURN_IF_ERROR(lockstep::ReduceScatter(ctx, source, buffer, op));
  // Chunk r is divided already for AVG.
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine, buffer.Flat(rank() * output.numel(), output.numel()));
  return output.CopyFrom(mine);
}

absl::Status HostBackend::Barrier(const OpContext& op_ctx) {
  AlgorithmContext ctx = Context(op_ctx, DType::kU8);
  ctx.element = 0;  // Empty messages.
  return DisseminationBarrier(ctx);
}

absl::Status HostBackend::AllGatherV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts,
                                     const OpContext& op_ctx) {
  if (output.numel() == 0) return absl::OkStatus();
  const std::vector<Chunk> blocks = BlocksOf(counts);
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor buffer, Stage(output, kSlotA, false));
  if (input.numel() > 0) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor own, buffer.Flat(blocks[rank()].offset, blocks[rank()].count));
    LOCKSTEP_RETURN_IF_ERROR(own.CopyFrom(input));
  }
  AlgorithmContext ctx = Context(op_ctx, output.dtype());
  LOCKSTEP_RETURN_IF_ERROR(RingAllGatherV(ctx, buffer, blocks));
  return Unstage(buffer, output);
}

absl::Status HostBackend::ReduceScatterV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts,
                                         ReduceOp op, const OpContext& op_ctx) {
  if (input.numel() == 0) return absl::OkStatus();
  const std::vector<Chunk> blocks = BlocksOf(counts);
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor source, Stage(input, kSlotA, true));
  Scratch& results = input.device().is_cpu() ? results_ : staging_;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor buffer, results.Get(kSlotB, input.numel(), input.dtype()));
  AlgorithmContext ctx = Context(op_ctx, input.dtype());
  LOCKSTEP_RETURN_IF_ERROR(RingReduceScatterV(ctx, source, buffer, blocks, op));
  if (output.numel() == 0) return absl::OkStatus();
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine, buffer.Flat(blocks[rank()].offset, blocks[rank()].count));
  return output.CopyFrom(mine);
}

absl::Status HostBackend::GatherV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts, int root,
                                  const OpContext& op_ctx) {
  const std::vector<Chunk> blocks = BlocksOf(counts);
  if (TotalOf(blocks) == 0) return absl::OkStatus();
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine, Stage(input, kSlotA, true));
  AlgorithmContext ctx = Context(op_ctx, input.dtype());
  if (rank() != root) return DirectGatherV(ctx, mine, Tensor(), blocks, root);
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor slots, Stage(output, kSlotB, false));
  LOCKSTEP_RETURN_IF_ERROR(DirectGatherV(ctx, mine, slots, blocks, root));
  return Unstage(slots, output);
}

absl::Status HostBackend::ScatterV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts,
                                   int root, const OpContext& op_ctx) {
  const std::vector<Chunk> blocks = BlocksOf(counts);
  if (TotalOf(blocks) == 0) return absl::OkStatus();
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine, Stage(output, kSlotA, false));
  AlgorithmContext ctx = Context(op_ctx, output.dtype());
  if (rank() == root) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor slots, Stage(input, kSlotB, true));
    LOCKSTEP_RETURN_IF_ERROR(DirectScatterV(ctx, slots, mine, blocks, root));
  } else {
    LOCKSTEP_RETURN_IF_ERROR(DirectScatterV(ctx, Tensor(), mine, blocks, root));
  }
  return Unstage(mine, output);
}

absl::Status HostBackend::AllToAll(const Tensor& input, const Tensor& output, absl::Span<const int64_t> send_counts,
                                   absl::Span<const int64_t> recv_counts, const OpContext& op_ctx) {
  const std::vector<Chunk> send_blocks = BlocksOf(send_counts), recv_blocks = BlocksOf(recv_counts);
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor in, Stage(input, kSlotA, true));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor out, Stage(output, kSlotB, false));
  AlgorithmContext ctx = Context(op_ctx, output.dtype());
  LOCKSTEP_RETURN_IF_ERROR(lockstep::AllToAll(ctx, in, send_blocks, out, recv_blocks, op_ctx.even_blocks));
  return Unstage(out, output);
}

absl::Status HostBackend::AllGatherBytes(const void* mine, size_t bytes, void* all, const OpContext& op_ctx) {
  std::vector<Transfer> transfers;
  char* out = static_cast<char*>(all);
  std::memcpy(out + rank() * bytes, mine, bytes);
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank()) continue;
    transfers.push_back(Transfer::Send(peer, mine, bytes));
    transfers.push_back(Transfer::Recv(peer, out + peer * bytes, bytes));
  }
  return transport_->Exchange(absl::MakeSpan(transfers), MessageTag{op_ctx.seq, kFingerprintTag}, op_ctx.deadline);
}

absl::Status HostBackend::RunPointToPoint(PointToPointSource& source, Deadline deadline) {
  return point_to_point_.Run(source, deadline);
}

}  // namespace lockstep
