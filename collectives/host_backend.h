// HostBackend: runs the CPU collective algorithms (ring and recursive-doubling
// all-reduce, ring reduce-scatter and all-gather with even or uneven blocks,
// binomial broadcast and reduce, direct gather and scatter, pairwise
// all-to-all, dissemination barrier) over any Transport.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(auto transport, TcpTransport::Create(store, rank, size, {}));
//   LOCKSTEP_ASSIGN_OR_RETURN(auto backend, HostBackend::Create(std::move(transport), {}));
//   LOCKSTEP_ASSIGN_OR_RETURN(auto comm, Communicator::Create(std::move(backend), {}));
//
// (collectives/bootstrap/tcp_communicator.h does all three.) CUDA tensors are staged
// through pinned host buffers that are allocated once and reused; results
// are copied back to the device before the operation completes. Reduce and
// ReduceScatter read their input in place (never copying it).
#ifndef LOCKSTEP_COLLECTIVES_HOST_BACKEND_H_
#define LOCKSTEP_COLLECTIVES_HOST_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "collectives/algorithms/algorithm.h"
#include "collectives/backend.h"
#include "collectives/point_to_point.h"
#include "collectives/transport/transport.h"

namespace lockstep {

class HostBackend : public Backend {
 public:
  // Fails (InvalidArgument) on bad options.
  static absl::StatusOr<std::unique_ptr<HostBackend>> Create(std::unique_ptr<Transport> transport,
                                                             AlgorithmOptions options, std::string transport_name = "");

  int rank() const override { return transport_->rank(); }
  int size() const override { return transport_->size(); }
  BackendCapabilities capabilities() const override;
  std::string PeerName(int peer) const override { return transport_->PeerName(peer); }

  absl::Status AllReduce(const Tensor& input, const Tensor& output, ReduceOp op, const OpContext& op_ctx) override;
  absl::Status Reduce(const Tensor& input, const Tensor& output, ReduceOp op, int root,
                      const OpContext& op_ctx) override;
  absl::Status Broadcast(const Tensor& tensor, int root, const OpContext& op_ctx) override;
  absl::Status AllGather(const Tensor& input, const Tensor& output, const OpContext& op_ctx) override;
  absl::Status Gather(const Tensor& input, const Tensor& output, int root, const OpContext& op_ctx) override;
  absl::Status Scatter(const Tensor& input, const Tensor& output, int root, const OpContext& op_ctx) override;
  absl::Status ReduceScatter(const Tensor& input, const Tensor& output, ReduceOp op, const OpContext& op_ctx) override;
  absl::Status Barrier(const OpContext& op_ctx) override;
  absl::Status AllGatherV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts,
                          const OpContext& op_ctx) override;
  absl::Status ReduceScatterV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts, ReduceOp op,
                              const OpContext& op_ctx) override;
  absl::Status GatherV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts, int root,
                       const OpContext& op_ctx) override;
  absl::Status ScatterV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts, int root,
                        const OpContext& op_ctx) override;
  absl::Status AllToAll(const Tensor& input, const Tensor& output, absl::Span<const int64_t> send_counts,
                        absl::Span<const int64_t> recv_counts, const OpContext& op_ctx) override;
  absl::Status AllGatherBytes(const void* mine, size_t bytes, void* all, const OpContext& op_ctx) override;
  absl::Status RunPointToPoint(PointToPointSource& source, Deadline deadline) override;
  void Abort(absl::string_view reason) override { transport_->Abort(reason); }
  TrafficCounters Traffic() const override { return transport_->Traffic(); }
  const char* AllReduceAlgorithm(int64_t count, DType dtype) const override;

 private:
  HostBackend(std::unique_ptr<Transport> transport, AlgorithmOptions options, std::string transport_name)
      : transport_(std::move(transport)),
        options_(WithLink(options, transport_name)),
        transport_name_(std::move(transport_name)),
        point_to_point_(*transport_, options.unexpected_bytes_limit) {}

  // `options` with `link` set (the transport's when unset): resolved once,
  // not per operation.
  static AlgorithmOptions WithLink(AlgorithmOptions options, absl::string_view transport_name) {
    if (!options.link.has_value()) options.link = LinkConstantsFor(transport_name);
    return options;
  }

  // The algorithms' context for an operation on `dtype` elements.
  AlgorithmContext Context(const OpContext& op_ctx, DType dtype);
  // A CPU tensor holding `t`'s data: `t` itself, or a pinned staging buffer
  // (slot `slot`) for a CUDA tensor, filled from it when `copy_in`.
  absl::StatusOr<Tensor> Stage(const Tensor& t, int slot, bool copy_in);

  std::unique_ptr<Transport> transport_;
  const AlgorithmOptions options_;
  const std::string transport_name_;
  Scratch scratch_;                   // Algorithms' temporaries.
  Scratch staging_{/*pinned=*/true};  // CUDA tensors' host copies.
  Scratch results_;                   // ReduceScatter's full-size results.
  PointToPointEngine point_to_point_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_HOST_BACKEND_H_
