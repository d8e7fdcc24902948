// HierarchicalBackend: collectives over two transports for groups whose
// ranks share some hosts but not all (e.g. 2 hosts x 2 ranks): a fast
// transport inside each host (shared memory) and a network one between
// hosts (TCP), as NCCL and Open MPI arrange mixed groups.
//
//   HierarchicalBackend::Levels levels;
//   levels.local = std::move(shm);       // this host's ranks, local order
//   levels.leaders = std::move(tcp);     // on leaders: one rank per host
//   levels.flat = std::move(flat_tcp);   // every rank
//   LOCKSTEP_ASSIGN_OR_RETURN(auto backend,
//       HierarchicalBackend::Create(layout, rank, std::move(levels), {}));
//   LOCKSTEP_ASSIGN_OR_RETURN(auto comm, Communicator::Create(std::move(backend), {}));
//
// (collectives/bootstrap/communicator_factory.h builds all of it when the ranks'
// host identities say the group is mixed.) Terms, as in
// collectives/hierarchical/hierarchical_layout.h: each host's ranks in ascending order,
// its lowest rank the host's leader (local rank 0); hosts numbered by their
// leaders. Three groups:
//   * local: the ranks of this host (`local`, size = ranks on this host);
//   * leaders: the leaders of all hosts (`leaders`, only on leaders);
//   * flat: all ranks (`flat`, a Backend, e.g. the host algorithms over TCP).
//
// The operations that gain from the hierarchy run over local + leaders:
//   AllReduce: Reduce to the leader inside each host, AllReduce among the
//     leaders, Broadcast inside each host. Only the leaders' partial sums
//     cross hosts (once per host instead of once per rank).
//   Reduce: Reduce to the leader inside each host, Reduce among leaders to
//     the root's leader, and one message to the root when it is not its
//     host's leader.
//   Broadcast: inside the root's host from the root, among the leaders from
//     the root's leader, then inside every other host from its leader.
//   Barrier: a barrier inside each host, among the leaders, and inside each
//     host again (nobody leaves before the leaders have met).
// Every level reduces with SUM for AVG; the division by the world size
// happens once, on the leaders (the root for Reduce), before results spread,
// so every rank gets the same bits. Floating-point sums are grouped by host,
// so they may differ in the last bits from a flat ring (integer-valued data
// gives identical results).
//
// The other operations (AllGather, Gather, Scatter, ReduceScatter, their
// uneven (V) forms, AllToAll, AllGatherBytes for fingerprints, and point to
// point) run on `flat` unchanged: they move each rank's own data, so a
// hierarchy would add hops without saving cross-host bytes.
//
// Failures: an error in any level fails the operation; the Communicator
// then calls Abort, which aborts every level, so the ranks that share a
// level with this one fail at once and abort theirs in turn: every rank
// fails with the first cause, none hangs. Errors name the level and its
// ranks in the group's numbering. CPU tensors only (the flat Backend's CUDA
// staging is not used for the hierarchical operations): capabilities()
// says so and the Communicator refuses CUDA tensors.
#ifndef LOCKSTEP_COLLECTIVES_HIERARCHICAL_HIERARCHICAL_BACKEND_H_
#define LOCKSTEP_COLLECTIVES_HIERARCHICAL_HIERARCHICAL_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "collectives/algorithms/algorithm.h"
#include "collectives/backend.h"
#include "collectives/hierarchical/hierarchical_layout.h"
#include "collectives/transport/transport.h"

namespace lockstep {

class HierarchicalBackend : public Backend {
 public:
  struct Levels {
    // This host's ranks (local rank = position in the host's list); null
    // when the host has one rank.
    std::unique_ptr<Transport> local;
    // One rank per host (rank = host number); on leaders when there are
    // several hosts, null otherwise.
    std::unique_ptr<Transport> leaders;
    // Every rank, numbered as the group.
    std::unique_ptr<Backend> flat;
    // For capabilities().name: "hierarchical(<local>+<leaders>)".
    std::string local_name = "shm";
    std::string leaders_name = "tcp";
  };

  // Fails (InvalidArgument) when a level's size or rank does not match the
  // layout, or on bad options.
  static absl::StatusOr<std::unique_ptr<HierarchicalBackend>> Create(HostLayout layout, int rank, Levels levels,
                                                                     AlgorithmOptions options);

  int rank() const override { return rank_; }
  int size() const override { return layout_.world_size(); }
  BackendCapabilities capabilities() const override;
  std::string PeerName(int peer) const override { return flat_->PeerName(peer); }

  absl::Status AllReduce(const Tensor& input, const Tensor& output, ReduceOp op, const OpContext& op_ctx) override;
  absl::Status Reduce(const Tensor& input, const Tensor& output, ReduceOp op, int root,
                      const OpContext& op_ctx) override;
  absl::Status Broadcast(const Tensor& tensor, int root, const OpContext& op_ctx) override;
  absl::Status Barrier(const OpContext& op_ctx) override;

  // On `flat`.
  absl::Status AllGather(const Tensor& input, const Tensor& output, const OpContext& op_ctx) override {
    return flat_->AllGather(input, output, op_ctx);
  }
  absl::Status Gather(const Tensor& input, const Tensor& output, int root, const OpContext& op_ctx) override {
    return flat_->Gather(input, output, root, op_ctx);
  }
  absl::Status Scatter(const Tensor& input, const Tensor& output, int root, const OpContext& op_ctx) override {
    return flat_->Scatter(input, output, root, op_ctx);
  }
  absl::Status ReduceScatter(const Tensor& input, const Tensor& output, ReduceOp op, const OpContext& op_ctx) override {
    return flat_->ReduceScatter(input, output, op, op_ctx);
  }
  absl::Status AllGatherV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts,
                          const OpContext& op_ctx) override {
    return flat_->AllGatherV(input, output, counts, op_ctx);
  }
  absl::Status ReduceScatterV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts, ReduceOp op,
                              const OpContext& op_ctx) override {
    return flat_->ReduceScatterV(input, output, counts, op, op_ctx);
  }
  absl::Status GatherV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts, int root,
                       const OpContext& op_ctx) override {
    return flat_->GatherV(input, output, counts, root, op_ctx);
  }
  absl::Status ScatterV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts, int root,
                        const OpContext& op_ctx) override {
    return flat_->ScatterV(input, output, counts, root, op_ctx);
  }
  absl::Status AllToAll(const Tensor& input, const Tensor& output, absl::Span<const int64_t> send_counts,
                        absl::Span<const int64_t> recv_counts, const OpContext& op_ctx) override {
    return flat_->AllToAll(input, output, send_counts, recv_counts, op_ctx);
  }
  absl::Status AllGatherBytes(const void* mine, size_t bytes, void* all, const OpContext& op_ctx) override {
    return flat_->AllGatherBytes(mine, bytes, all, op_ctx);
  }
  absl::Status RunPointToPoint(PointToPointSource& source, Deadline deadline) override {
    return flat_->RunPointToPoint(source, deadline);
  }

  void Abort(absl::string_view reason) override;
  // Every level's bytes, per peer in the group's numbering.
  TrafficCounters Traffic() const override;
  // "hierarchical/<the leaders' algorithm>".
  const char* AllReduceAlgorithm(int64_t count, DType dtype) const override;

 private:
  enum class Level { kLocal, kLeaders };

  HierarchicalBackend(HostLayout layout, int rank, Levels levels, AlgorithmOptions options);

  int host() const { return layout_.host_of[rank_]; }
  bool leader() const { return layout_.is_leader(rank_); }
  bool has_local() const { return local_ != nullptr; }
  bool has_leaders() const { return leaders_ != nullptr; }
  // The algorithms' context on one level; `first_tag` keeps the steps of
  // two algorithms of one operation on one level apart.
  AlgorithmContext Context(Level level, const OpContext& op_ctx, DType dtype, uint32_t first_tag);
  // `status` with the level, the operation and the level's ranks in front.
  absl::Status Annotate(absl::Status status, Level level, const char* op) const;

  const HostLayout layout_;
  const int rank_;
  const AlgorithmOptions options_;
  std::unique_ptr<Transport> local_, leaders_;
  std::unique_ptr<Backend> flat_;
  const std::string name_;
  const LinkConstants local_link_;  // The local transport's (LinkConstantsFor).
  Scratch scratch_;                 // The algorithms' temporaries.
  Scratch partial_;                 // A leader's partial result in Reduce.
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_HIERARCHICAL_HIERARCHICAL_BACKEND_H_
