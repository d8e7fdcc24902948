// NcclBackend: a Backend (collectives/backend.h) that runs every operation
// with NCCL on CUDA tensors, one rank per GPU. Build it through
// CreateNcclCommunicator (collectives/nccl/nccl_communicator.h); tests build it
// over a fake NcclComm.
//
// How an operation runs: the communicator's own stream waits (CUDA event,
// not the host) for the caller's stream (`NcclBackendOptions.caller_stream`,
// the legacy default stream unless set), the NCCL calls are queued, an event
// is recorded after them, and that event is polled until it fires, the
// operation's deadline passes, or NCCL reports an asynchronous error.
// When only device memory is involved, the call returns as soon as the
// event is recorded (OpContext::queued): the Communicator's completion
// thread awaits the event and completes the Work, Work::SynchronizeStream
// makes a caller's stream wait on it without blocking the host, and the
// next operations are queued on the device meanwhile (as ProcessGroupNCCL
// does). With CPU tensors staged through the device, the call returns once
// the results were copied back.
//
// CPU tensors are accepted and staged through the communicator's device
// memory (so DDP's signature check and a trainer's metrics work on the same
// communicator); large CPU collectives belong on the host backend.
//
// Ops: AllReduce, Reduce, Broadcast, AllGather, ReduceScatter as NCCL's own;
// Gather, Scatter, AllToAll and the uneven AllGatherV, GatherV, ScatterV as
// grouped Send/Recv (ncclGroupStart/End); ReduceScatterV as one ncclReduce
// per rank in a group; Barrier as a one-element all-reduce; point to point as grouped Send/Recv per batch (NCCL has no
// tags: messages match per peer in call order, which the Communicator
// already guarantees). AVG is ncclAvg for floating dtypes when the linked
// NCCL is >= 2.10, else a sum followed by core's exact division (always for
// integers, so the result equals the host backend's). bool travels as
// uint8 with SUM as MAX and PROD as MIN (results stay 0 or 1, as
// ProcessGroupNCCL does); NCCL has no bitwise reductions, which
// capabilities() says so that the Communicator refuses them.
//
// Watchdog (collectives/nccl/nccl_watchdog.h): an operation past its deadline, or
// an asynchronous NCCL error, aborts the NCCL communicator (ncclCommAbort)
// and fails the operation in flight with its fingerprint; the Communicator
// then shares the error with the other ranks through the store, as for the
// host backend, and fails every later operation.
#ifndef LOCKSTEP_COLLECTIVES_NCCL_NCCL_BACKEND_H_
#define LOCKSTEP_COLLECTIVES_NCCL_NCCL_BACKEND_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "collectives/backend.h"
#include "collectives/nccl/nccl_api.h"
#include "collectives/nccl/nccl_watchdog.h"
#include "core/device.h"

namespace lockstep {

struct NcclBackendOptions {
  // The cudaStream_t whose queued work every operation waits for (nullptr:
  // the legacy default stream, which the core kernels and synchronous
  // copies use).
  void* caller_stream = nullptr;
  // Accept CPU tensors too, staged through the communicator's device memory
  // (small host-side collectives: DDP's signature check, metrics). Off: the
  // Communicator refuses them, and the backend takes every tensor's address
  // as device memory (tests over the fake NCCL).
  bool cpu_tensors = true;
  // How often the watchdog checks deadlines and NCCL's asynchronous errors. > 0.
  std::chrono::milliseconds watchdog_interval = std::chrono::milliseconds(100);
};

class NcclBackend final : public Backend {
 public:
  // `nccl_version`: the linked NCCL's ncclGetVersion code (decides AVG).
  static absl::StatusOr<std::unique_ptr<NcclBackend>> Create(std::unique_ptr<NcclComm> comm, int rank, int size,
                                                             Device device, int nccl_version,
                                                             NcclBackendOptions options = {});
  ~NcclBackend() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  BackendCapabilities capabilities() const override;
  std::string PeerName(int peer) const override;

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
  // ncclCommSplit (capabilities().native_split from NCCL 2.18 on).
  absl::StatusOr<std::unique_ptr<Backend>> Split(int color, int key, int new_rank, int new_size,
                                                 const OpContext& op_ctx) override;
  void Abort(absl::string_view reason) override;
  TrafficCounters Traffic() const override;

  // Whether AVG runs as ncclAvg for `dtype` (else sum, then division).
  bool UsesNcclAvg(DType dtype) const;
  // The op handed to NCCL: in a world of one, AVG as SUM (both are the
  // input itself). NCCL before 2.29.7 runs a one-rank ncclAvg through a
  // kernel that leaves a tail of the output unwritten (NCCL issue 1950:
  // seen on 2.28.3 for bf16 reduce-scatter of 2^20 + 3 elements); SUM is a
  // copy there.
  ReduceOp OneRankAvgAsSum(ReduceOp op) const { return size_ == 1 && op == ReduceOp::kAvg ? ReduceOp::kSum : op; }

 private:
  NcclBackend(std::unique_ptr<NcclComm> comm, int rank, int size, Device device, int nccl_version,
              NcclBackendOptions options);

  using QueuedFn = std::function<void(std::shared_ptr<StreamMarker>, std::function<absl::Status()>)>;
  // Queues `enqueue` after the caller's stream and records an event. With
  // `queued`, hands it the event and how to await it, and returns;
  // otherwise awaits the event. The operation stays registered with the
  // watchdog until it has been awaited. `fingerprint` names it in errors.
  absl::Status Run(const std::string& fingerprint, Deadline deadline, const QueuedFn& queued,
                   const std::function<absl::Status()>& enqueue);
  // Polls `event` until it fired, the watchdog failed the communicator, or
  // the device reported an error.
  absl::Status AwaitEvent(const std::string& fingerprint, NcclEvent& event);
  // op_ctx.queued when every defined tensor of `tensors` is device memory
  // (nothing staged through the host, so the operation is done once its
  // event fired); else nothing (the call returns when it finished).
  QueuedFn QueuedIfOnDevice(const OpContext& op_ctx, std::initializer_list<const Tensor*> tensors) const;
  // The watchdog's failure, naming `fingerprint`'s operation.
  absl::Status NotRun(const std::string& fingerprint);
  // "AllReduce seq 3 (f32, 1000 elements, SUM)".
  std::string Fingerprint(absl::string_view op, uint64_t seq, const Tensor& t, absl::string_view reduce_op = {},
                          int root = -1) const;

  std::unique_ptr<NcclComm> comm_;
  const int rank_, size_;
  const Device device_;
  const int nccl_version_;
  const NcclBackendOptions options_;
  std::atomic<bool> aborted_{false};
  std::unique_ptr<NcclWatchdog> watchdog_;  // Last: stops before comm_ goes.
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_NCCL_NCCL_BACKEND_H_
