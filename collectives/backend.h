// Backend: what runs collectives for a Communicator. The Communicator
// (collectives/communicator.h) owns argument checks, sequence numbers,
// fingerprints, Work and failure sharing; a Backend only runs operations
// whose arguments were already checked, one at a time, on the
// communicator's thread, in the same order on every rank.
//
//   HostBackend (collectives/host_backend.h): the CPU algorithms over any
//     Transport (TCP, shared memory); CUDA tensors staged through pinned
//     host memory.
//   HierarchicalBackend (collectives/hierarchical/hierarchical_backend.h): groups that
//     span hosts with several ranks each. All-reduce, reduce, broadcast and
//     barrier run inside each host (shared memory), then among the hosts'
//     leaders (TCP), then inside each host again; the operations that move
//     each rank's own data run on a flat TCP backend.
//   NcclBackend (collectives/nccl/nccl_backend.h): NCCL, one rank per GPU.
//     Operations on device memory return once queued on NCCL's stream
//     (OpContext::queued) and complete when their event fires; CPU tensors
//     are staged through the device.
//
// Tensors passed here are defined, with the dtypes, element counts and
// devices that the Communicator's checks guarantee (see its header), and a
// device the backend's capabilities accept. Each call returns when the
// operation has finished (or failed), or, for a device backend, once it was
// queued there (OpContext::queued); its error names the operation's peer
// where there is one. After an error the Communicator calls Abort and never
// calls the backend again.
#ifndef LOCKSTEP_COLLECTIVES_BACKEND_H_
#define LOCKSTEP_COLLECTIVES_BACKEND_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "collectives/stream_marker.h"
#include "collectives/transport/transport.h"
#include "core/deadline.h"
#include "core/device.h"
#include "core/reduce_op.h"
#include "core/tensor.h"

namespace lockstep {

// Identifies one running operation.
struct OpContext {
  uint64_t seq = 0;   // The collective's sequence number (same on every rank).
  Deadline deadline;  // When it must have finished.
  // A backend that runs on a device may call this (when set) once the
  // operation is queued there, if only device memory is involved, and then
  // return OK at once instead of waiting: `marker` orders callers' streams
  // after the operation (Work::SynchronizeStream), and `finish` blocks until
  // it has finished on the device and returns its final status. The
  // Communicator calls `finish` on its completion thread, in operation
  // order, and completes the Work with it; its own thread meanwhile queues
  // the next operations, so several can be on the device at once. The
  // operation's tensors stay referenced until `finish` has returned.
  std::function<void(std::shared_ptr<StreamMarker> marker, std::function<absl::Status()> finish)> queued;
  // AllToAll: every rank's blocks are of one size on every rank (the even
  // form, Communicator::AllToAll), so an algorithm that needs that (Bruck's)
  // may run; false for AllToAllV, whose counts only each pair shares.
  bool even_blocks = false;
};

struct BackendCapabilities {
  std::string name;  // "host over tcp", for messages
  bool cpu_tensors = false;
  bool cuda_tensors = false;
  bool point_to_point = false;
  // BAND, BOR and BXOR (NCCL has none).
  bool bitwise_reductions = false;
  // Receives from any rank (PointToPointOp::kAnySource; NCCL has none).
  bool any_source_receive = false;
  // Split() makes subgroups itself (NCCL >= 2.18: ncclCommSplit); else the
  // Communicator builds them anew through its store.
  bool native_split = false;
};

// One point-to-point operation of a batch (see RunPointToPoint).
struct PointToPointOp {
  // A receive's peer that accepts a message from any rank.
  static constexpr int kAnySource = -1;

  bool send = true;
  int peer = kAnySource;
  uint32_t tag = 0;  // User tag (below 2^31).
  // Sends: numbered per (peer, tag), in call order (travels in the
  // message, which the receiver checks). Receives: per (peer, tag), for
  // messages only.
  uint64_t seq = 0;
  Tensor tensor;
  // Called once by the backend when this operation has finished (OK), from
  // the communicator's thread, with the rank the message came from (a
  // receive) or went to (a send). Operations still running when the batch
  // fails get the batch's error from the Communicator instead.
  std::function<void(int peer)> done;
};

// Where point-to-point operations come from while a batch runs.
class PointToPointSource {
 public:
  virtual ~PointToPointSource() = default;
  // Moves the operations posted since the last call into `ops`.
  virtual void Take(std::vector<PointToPointOp>* ops) = 0;
  // Readable when Take has more (never read by the backend); -1: none.
  virtual int wake_fd() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual BackendCapabilities capabilities() const = 0;
  // "rank 2 (10.0.0.3:41234)", for error messages.
  virtual std::string PeerName(int peer) const = 0;

  // The name of the algorithm AllReduce runs on `count` elements of
  // `dtype` ("ring", "rabenseifner", ...; "" where the backend does not
  // say, as NCCL's): a static string.
  virtual const char* AllReduceAlgorithm(int64_t count, DType dtype) const {
    (void)count, (void)dtype;
    return "";
  }

  // Semantics as Communicator's methods of the same names.
  virtual absl::Status AllReduce(const Tensor& input, const Tensor& output, ReduceOp op, const OpContext& op_ctx) = 0;
  virtual absl::Status Reduce(const Tensor& input, const Tensor& output, ReduceOp op, int root,
                              const OpContext& op_ctx) = 0;
  virtual absl::Status Broadcast(const Tensor& tensor, int root, const OpContext& op_ctx) = 0;
  virtual absl::Status AllGather(const Tensor& input, const Tensor& output, const OpContext& op_ctx) = 0;
  virtual absl::Status Gather(const Tensor& input, const Tensor& output, int root, const OpContext& op_ctx) = 0;
  virtual absl::Status Scatter(const Tensor& input, const Tensor& output, int root, const OpContext& op_ctx) = 0;
  virtual absl::Status ReduceScatter(const Tensor& input, const Tensor& output, ReduceOp op,
                                     const OpContext& op_ctx) = 0;
  virtual absl::Status Barrier(const OpContext& op_ctx) = 0;

  // Uneven blocks: `counts` (one per rank, checked by the Communicator
  // against the tensors) says how many elements each rank's block holds;
  // blocks lie one after another in rank order.
  virtual absl::Status AllGatherV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts,
                                  const OpContext& op_ctx) = 0;
  virtual absl::Status ReduceScatterV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts,
                                      ReduceOp op, const OpContext& op_ctx) = 0;
  virtual absl::Status GatherV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts, int root,
                               const OpContext& op_ctx) = 0;
  virtual absl::Status ScatterV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts, int root,
                                const OpContext& op_ctx) = 0;
  // send_counts[j] elements of `input` (blocks in rank order) go to rank j;
  // recv_counts[i] elements from rank i land in `output` (likewise).
  virtual absl::Status AllToAll(const Tensor& input, const Tensor& output, absl::Span<const int64_t> send_counts,
                                absl::Span<const int64_t> recv_counts, const OpContext& op_ctx) = 0;

  // Every rank's `bytes` bytes at `mine` into `all` (rank-major); used for
  // the debug fingerprints, so it must work for any backend state.
  virtual absl::Status AllGatherBytes(const void* mine, size_t bytes, void* all, const OpContext& op_ctx) = 0;

  // Runs point-to-point operations from `source` concurrently (sends and
  // receives with the same peer at once) until all that it gave have
  // finished and it has no more. A message goes to the earliest posted
  // receive with its tag from its sender or from any rank (kAnySource,
  // where capabilities().any_source_receive); messages from one peer with
  // one tag arrive in the order they were sent.
  virtual absl::Status RunPointToPoint(PointToPointSource& source, Deadline deadline) = 0;

  // Only where capabilities().native_split: every rank of this backend
  // calls it as one of its operations (same order everywhere); a member
  // (color >= 0) gets the subgroup's backend, in which it is `new_rank` of
  // `new_size`; a rank without a color gets nullptr. The default refuses.
  virtual absl::StatusOr<std::unique_ptr<Backend>> Split(int color, int key, int new_rank, int new_size,
                                                         const OpContext& op_ctx);

  // Tells the peers why (best effort) and stops: see Transport::Abort.
  virtual void Abort(absl::string_view reason) = 0;

  // Payload bytes moved per peer so far.
  virtual TrafficCounters Traffic() const = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_BACKEND_H_
