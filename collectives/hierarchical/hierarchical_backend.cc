#include "collectives/hierarchical/hierarchical_backend.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/algorithms/all_reduce.h"
#include "collectives/algorithms/barrier.h"
#include "collectives/algorithms/broadcast.h"
#include "collectives/algorithms/reduce.h"
#include "core/status.h"

namespace lockstep {
namespace {

// `options` with `link` set: only the leaders' level all-reduces, over TCP
// between hosts (resolved once, not per operation).
AlgorithmOptions WithTcpLink(AlgorithmOptions options) {
  if (!options.link.has_value()) options.link = LinkConstantsFor("tcp");
  return options;
}

// First step tags of the algorithms that follow each other on one level
// within one operation (each algorithm numbers its steps up from there).
constexpr uint32_t kFirstPhaseTag = 0;
constexpr uint32_t kSecondPhaseTag = 1 << 20;
// The one message from a host's leader to a root that is not the leader.
constexpr uint32_t kHopTag = 1 << 21;

absl::StatusOr<Tensor> Flat1d(const Tensor& t) { return t.Flat(0, t.numel()); }

}  // namespace

absl::StatusOr<std::unique_ptr<HierarchicalBackend>> HierarchicalBackend::Create(HostLayout layout, int rank,
                                                                                 Levels levels,
                                                                                 AlgorithmOptions options) {
  LOCKSTEP_RETURN_IF_ERROR(ValidateAlgorithmOptions(options));
  const int world = layout.world_size();
  if (rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("HierarchicalBackend::Create: rank ", rank, " is not in [0, ", world, ")"));
  }
  if (levels.flat == nullptr || levels.flat->size() != world || levels.flat->rank() != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("HierarchicalBackend::Create: rank ", rank, ": the flat level must be a backend of all ", world,
                     " ranks with this rank's number; got ",
                     levels.flat == nullptr ? std::string("none")
                                            : absl::StrCat("rank ", levels.flat->rank(), " of ", levels.flat->size())));
  }
  const int host = layout.host_of[rank];
  const int local_size = static_cast<int>(layout.hosts[host].size());
  const int local_rank = layout.local_index[rank];
  if (local_size > 1 &&
      (levels.local == nullptr || levels.local->size() != local_size || levels.local->rank() != local_rank)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HierarchicalBackend::Create: rank ", rank, " on host ", host, " (ranks ",
        absl::StrJoin(layout.hosts[host], ","), ") needs a local transport of ", local_size,
        " ranks in which it is rank ", local_rank, "; got ",
        levels.local == nullptr ? std::string("none")
                                : absl::StrCat("rank ", levels.local->rank(), " of ", levels.local->size())));
  }
  const bool needs_leaders = local_rank == 0 && layout.num_hosts() > 1;
  if (needs_leaders &&
      (levels.leaders == nullptr || levels.leaders->size() != layout.num_hosts() || levels.leaders->rank() != host)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HierarchicalBackend::Create: rank ", rank, " leads host ", host, " and needs a leaders' transport of ",
        layout.num_hosts(), " ranks in which it is rank ", host, "; got ",
        levels.leaders == nullptr ? std::string("none")
                                  : absl::StrCat("rank ", levels.leaders->rank(), " of ", levels.leaders->size())));
  }
  if (!needs_leaders && levels.leaders != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("HierarchicalBackend::Create: rank ", rank,
                                                   " is not a leader of several hosts but was given a leaders' "
                                                   "transport; give it to the lowest rank of each host only"));
  }
  if (local_size == 1) levels.local.reset();
  return std::unique_ptr<HierarchicalBackend>(
      new HierarchicalBackend(std::move(layout), rank, std::move(levels), options));
}

HierarchicalBackend::HierarchicalBackend(HostLayout layout, int rank, Levels levels, AlgorithmOptions options)
    : layout_(std::move(layout)),
      rank_(rank),
      options_(WithTcpLink(options)),
      local_(std::move(levels.local)),
      leaders_(std::move(levels.leaders)),
      flat_(std::move(levels.flat)),
      name_(absl::StrCat("hierarchical(", levels.local_name, "+", levels.leaders_name, ")")),
      local_link_(LinkConstantsFor(levels.local_name)) {}

BackendCapabilities HierarchicalBackend::capabilities() const {
  BackendCapabilities c;
  c.name = name_;
  c.cpu_tensors = true;
  c.point_to_point = true;
  c.bitwise_reductions = true;
  c.any_source_receive = true;
  return c;
}

const char* HierarchicalBackend::AllReduceAlgorithm(int64_t count, DType dtype) const {
  if (layout_.num_hosts() == 1) return "hierarchical/local";
  switch (ChooseAllReduce(options_.all_reduce, options_.small_message_bytes, *options_.link,
                          static_cast<size_t>(count) * DTypeSize(dtype), count, layout_.num_hosts())) {
    case lockstep::AllReduceAlgorithm::kRing:
      return "hierarchical/ring";
    case lockstep::AllReduceAlgorithm::kRabenseifner:
      return "hierarchical/rabenseifner";
    case lockstep::AllReduceAlgorithm::kTree:
      return "hierarchical/tree";
    default:
      return "hierarchical/recursive_doubling";
  }
}

AlgorithmContext HierarchicalBackend::Context(Level level, const OpContext& op_ctx, DType dtype, uint32_t first_tag) {
  Transport& transport = level == Level::kLocal ? *local_ : *leaders_;
  AlgorithmContext ctx{transport, op_ctx.seq, first_tag, op_ctx.deadline, options_.segment_bytes, &scratch_};
  ctx.small_message_bytes = options_.small_message_bytes;
  ctx.all_reduce = options_.all_reduce;
  // Inside a host the local transport's links (shared memory's), between
  // hosts the agreed network constants.
  ctx.link = level == Level::kLocal ? local_link_ : *options_.link;
  ctx.element = static_cast<uint8_t>(static_cast<int>(dtype) + 1);
  return ctx;
}

absl::Status HierarchicalBackend::Annotate(absl::Status status, Level level, const char* op) const {
  if (status.ok()) return status;
  std::string where;
  if (level == Level::kLocal) {
    where = absl::StrCat("inside host ", host(), " (local rank i is rank [", absl::StrJoin(layout_.hosts[host()], ","),
                         "][i])");
  } else {
    std::vector<int> leaders;
    for (int h = 0; h < layout_.num_hosts(); ++h) leaders.push_back(layout_.leader(h));
    where = absl::StrCat("among the hosts' leaders (rank i there is rank [", absl::StrJoin(leaders, ","), "][i])");
  }
  return absl::Status(status.code(),
                      absl::StrCat("hierarchical ", op, " on rank ", rank_, ", ", where, ": ", status.message()));
}

absl::Status HierarchicalBackend::AllReduce(const Tensor& input, const Tensor& output, ReduceOp op,
                                            const OpContext& op_ctx) {
  if (!output.SharesStorageWith(input) || output.raw_data() != input.raw_data()) {
    LOCKSTEP_RETURN_IF_ERROR(output.CopyFrom(input));
  }
  if (output.numel() == 0) return absl::OkStatus();
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor buffer, Flat1d(output));
  const ReduceOp step = StepOp(op);
  if (has_local()) {
    AlgorithmContext ctx = Context(Level::kLocal, op_ctx, buffer.dtype(), kFirstPhaseTag);
    // In place: non-leaders' buffers get partial sums, overwritten below.
    LOCKSTEP_RETURN_IF_ERROR(Annotate(ReduceTo(ctx, buffer, buffer, step, 0), Level::kLocal, "all_reduce"));
  }
  if (leader()) {
    if (has_leaders()) {
      AlgorithmContext ctx = Context(Level::kLeaders, op_ctx, buffer.dtype(), kFirstPhaseTag);
      LOCKSTEP_RETURN_IF_ERROR(Annotate(lockstep::AllReduce(ctx, buffer, step), Level::kLeaders, "all_reduce"));
    }
    LOCKSTEP_RETURN_IF_ERROR(FinishAverage(op, buffer, size()));
  }
  if (has_local()) {
    AlgorithmContext ctx = Context(Level::kLocal, op_ctx, buffer.dtype(), kSecondPhaseTag);
    LOCKSTEP_RETURN_IF_ERROR(Annotate(BroadcastFrom(ctx, buffer, 0), Level::kLocal, "all_reduce"));
  }
  return absl::OkStatus();
}

absl::Status HierarchicalBackend::Reduce(const Tensor& input, const Tensor& output, ReduceOp op, int root,
                                         const OpContext& op_ctx) {
  if (input.numel() == 0) return absl::OkStatus();
  const ReduceOp step = StepOp(op);
  const int root_host = layout_.host_of[root];
  const int root_leader = layout_.leader(root_host);
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine, Flat1d(input));
  // A leader's partial result: the root's output when the leader is the
  // root, else a reused buffer. The input is never written.
  Tensor partial;
  if (leader()) {
    if (rank_ == root) {
      LOCKSTEP_ASSIGN_OR_RETURN(partial, Flat1d(output));
    } else {
      LOCKSTEP_ASSIGN_OR_RETURN(partial, partial_.Get(0, input.numel(), input.dtype()));
    }
  }
  if (has_local()) {
    AlgorithmContext ctx = Context(Level::kLocal, op_ctx, input.dtype(), kFirstPhaseTag);
    LOCKSTEP_RETURN_IF_ERROR(Annotate(ReduceTo(ctx, mine, partial, step, 0), Level::kLocal, "reduce"));
  } else if (partial.raw_data() != mine.raw_data()) {
    LOCKSTEP_RETURN_IF_ERROR(partial.CopyFrom(mine));
  }
  if (leader() && has_leaders()) {
    AlgorithmContext ctx = Context(Level::kLeaders, op_ctx, input.dtype(), kFirstPhaseTag);
    LOCKSTEP_RETURN_IF_ERROR(Annotate(ReduceTo(ctx, partial, partial, step, root_host), Level::kLeaders, "reduce"));
  }
  if (root != root_leader && host() == root_host) {
    // The last hop, inside the root's host: its leader holds the result.
    Transfer t = rank_ == root_leader ? Transfer::Send(layout_.local_index[root], partial.raw_data(), partial.nbytes())
                 : rank_ == root      ? Transfer::Recv(0, output.raw_data(), output.nbytes())
                                      : Transfer();
    if (rank_ == root_leader || rank_ == root) {
      const MessageTag tag{op_ctx.seq, kHopTag, static_cast<uint8_t>(static_cast<int>(input.dtype()) + 1)};
      LOCKSTEP_RETURN_IF_ERROR(Annotate(local_->Exchange({&t, 1}, tag, op_ctx.deadline), Level::kLocal, "reduce"));
    }
  }
  if (rank_ == root) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor out, Flat1d(output));
    return FinishAverage(op, out, size());
  }
  return absl::OkStatus();
}

absl::Status HierarchicalBackend::Broadcast(const Tensor& tensor, int root, const OpContext& op_ctx) {
  if (tensor.numel() == 0) return absl::OkStatus();
  const int root_host = layout_.host_of[root];
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor buffer, Flat1d(tensor));
  auto local = [&](int local_root) -> absl::Status {
    if (!has_local()) return absl::OkStatus();
    AlgorithmContext ctx = Context(Level::kLocal, op_ctx, buffer.dtype(), kFirstPhaseTag);
    return Annotate(BroadcastFrom(ctx, buffer, local_root), Level::kLocal, "broadcast");
  };
  auto leaders = [&]() -> absl::Status {
    if (!leader() || !has_leaders()) return absl::OkStatus();
    AlgorithmContext ctx = Context(Level::kLeaders, op_ctx, buffer.dtype(), kFirstPhaseTag);
    return Annotate(BroadcastFrom(ctx, buffer, root_host), Level::kLeaders, "broadcast");
  };
  // The root's host first spreads it (its leader included), then the
  // leaders carry it to the other hosts, which spread it last.
  if (host() == root_host) {
    LOCKSTEP_RETURN_IF_ERROR(local(layout_.local_index[root]));
    return leaders();
  }
  LOCKSTEP_RETURN_IF_ERROR(leaders());
  return local(0);
}

absl::Status HierarchicalBackend::Barrier(const OpContext& op_ctx) {
  // Inside (every local rank has arrived), among the leaders (every rank
  // has), inside again (nobody leaves before its leader knows that).
  for (uint32_t phase : {kFirstPhaseTag, kSecondPhaseTag}) {
    if (has_local()) {
      AlgorithmContext ctx = Context(Level::kLocal, op_ctx, DType::kU8, phase);
      ctx.element = 0;
      LOCKSTEP_RETURN_IF_ERROR(Annotate(DisseminationBarrier(ctx), Level::kLocal, "barrier"));
    }
    if (phase == kFirstPhaseTag && leader() && has_leaders()) {
      AlgorithmContext ctx = Context(Level::kLeaders, op_ctx, DType::kU8, kFirstPhaseTag);
      ctx.element = 0;
      LOCKSTEP_RETURN_IF_ERROR(Annotate(DisseminationBarrier(ctx), Level::kLeaders, "barrier"));
    }
  }
  return absl::OkStatus();
}

void HierarchicalBackend::Abort(absl::string_view reason) {
  if (local_ != nullptr) local_->Abort(reason);
  if (leaders_ != nullptr) leaders_->Abort(reason);
  flat_->Abort(reason);
}

TrafficCounters HierarchicalBackend::Traffic() const {
  TrafficCounters total = flat_->Traffic();
  auto add = [&](const Transport& level, const std::vector<int>& ranks) {
    const TrafficCounters t = level.Traffic();
    for (size_t i = 0; i < ranks.size() && i < t.bytes_sent.size(); ++i) {
      total.bytes_sent[ranks[i]] += t.bytes_sent[i];
      total.bytes_received[ranks[i]] += t.bytes_received[i];
    }
  };
  if (local_ != nullptr) add(*local_, layout_.hosts[host()]);
  if (leaders_ != nullptr) {
    std::vector<int> leaders;
    for (int h = 0; h < layout_.num_hosts(); ++h) leaders.push_back(layout_.leader(h));
    add(*leaders_, leaders);
  }
  return total;
}

}  // namespace lockstep
