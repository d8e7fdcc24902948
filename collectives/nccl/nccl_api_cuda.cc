// NcclRuntime and NcclComm over the real NCCL and CUDA runtime. The only
// file that includes nccl.h.
#include <cuda_runtime.h>
#include <nccl.h>

#include <unistd.h>
#include <atomic>
#include <chrono>

#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/nccl/nccl_api.h"
#include "core/cuda/cuda_runtime.h"
#include "core/status.h"

namespace lockstep {
namespace {

absl::Status FromCuda(cudaError_t error, absl::string_view call) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, ": ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")"));
}

absl::Status FromNccl(ncclResult_t result, absl::string_view call, ncclComm_t comm) {
  if (result == ncclSuccess || result == ncclInProgress) return absl::OkStatus();
  const char* last = ncclGetLastError(comm);
  std::string message = absl::StrCat(call, ": ", ncclGetErrorString(result));
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&message, " (", last, ")");
  if (result == ncclInvalidUsage) {
    // What NCCL says when two ranks share a GPU ("Duplicate GPU detected").
    absl::StrAppend(&message,
                    ". If several ranks use the same GPU: NCCL needs one rank per GPU; use the host backend "
                    "(LOCKSTEP_BACKEND=host), which stages CUDA tensors through pinned host memory");
  }
  return result == ncclRemoteError || result == ncclSystemError ? absl::UnavailableError(message)
                                                                : absl::InternalError(message);
}

absl::StatusOr<ncclDataType_t> ToNccl(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF64:
      return ncclFloat64;
    case DType::kF16:
      return ncclFloat16;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kU8:
      return ncclUint8;
    case DType::kI8:
      return ncclInt8;
    // One byte of 0 or 1; the backend maps SUM to MAX and PROD to MIN, so
    // results stay 0 or 1 (as ProcessGroupNCCL does).
    case DType::kBool:
      return ncclUint8;
  }
  return absl::InvalidArgumentError(absl::StrCat("NCCL has no type for dtype ", static_cast<int>(dtype)));
}

absl::StatusOr<ncclRedOp_t> ToNccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kProd:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    // The backend says it has no bitwise reductions
    // (BackendCapabilities::bitwise_reductions), so the Communicator refuses
    // them first; this is the last guard.
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("NCCL has no reduction ", ReduceOpName(op), " (BAND, BOR and BXOR run on the host backend)"));
}

class CudaNcclEvent final : public NcclEvent {
 public:
  explicit CudaNcclEvent(cudaEvent_t event) : event_(event) {}
  ~CudaNcclEvent() override { cudaEventDestroy(event_); }
  CudaNcclEvent(const CudaNcclEvent&) = delete;
  CudaNcclEvent& operator=(const CudaNcclEvent&) = delete;

  absl::StatusOr<bool> Query() override {
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaErrorNotReady) return false;
    LOCKSTEP_RETURN_IF_ERROR(FromCuda(e, "cudaEventQuery"));
    return true;
  }
  absl::Status MakeStreamWait(void* stream) override {
    return FromCuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), event_, 0), "cudaStreamWaitEvent");
  }

 private:
  cudaEvent_t event_;
};

class CudaNcclComm final : public NcclComm {
 public:
  CudaNcclComm(ncclComm_t comm, int device, cuda::Stream stream, cudaEvent_t caller_event, bool non_blocking)
      : comm_(comm),
        device_(device),
        stream_(std::move(stream)),
        caller_event_(caller_event),
        non_blocking_(non_blocking) {}
  ~CudaNcclComm() override {
    cudaSetDevice(device_);
    if (!aborted_.exchange(true)) Close();
    if (scratch_ != nullptr) cudaFree(scratch_);
    cudaEventDestroy(caller_event_);
  }
  CudaNcclComm(const CudaNcclComm&) = delete;
  CudaNcclComm& operator=(const CudaNcclComm&) = delete;

  absl::Status WaitFor(void* stream) override {
    LOCKSTEP_RETURN_IF_ERROR(Use("WaitFor"));
    LOCKSTEP_RETURN_IF_ERROR(
        FromCuda(cudaEventRecord(caller_event_, static_cast<cudaStream_t>(stream)), "cudaEventRecord(caller stream)"));
    return FromCuda(cudaStreamWaitEvent(native(), caller_event_, 0), "cudaStreamWaitEvent");
  }

  absl::Status AllReduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op) override {
    LOCKSTEP_RETURN_IF_ERROR(Use("ncclAllReduce"));
    LOCKSTEP_ASSIGN_OR_RETURN(ncclDataType_t type, ToNccl(dtype));
    LOCKSTEP_ASSIGN_OR_RETURN(ncclRedOp_t reduction, ToNccl(op));
    return Finish(ncclAllReduce(in, out, count, type, reduction, comm_, native()), "ncclAllReduce");
  }
  absl::Status Broadcast(const void* in, void* out, size_t count, DType dtype, int root) override {
    LOCKSTEP_RETURN_IF_ERROR(Use("ncclBroadcast"));
    LOCKSTEP_ASSIGN_OR_RETURN(ncclDataType_t type, ToNccl(dtype));
    return Finish(ncclBroadcast(in, out, count, type, root, comm_, native()), "ncclBroadcast");
  }
  absl::Status Reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op, int root) override {
    LOCKSTEP_RETURN_IF_ERROR(Use("ncclReduce"));
    LOCKSTEP_ASSIGN_OR_RETURN(ncclDataType_t type, ToNccl(dtype));
    LOCKSTEP_ASSIGN_OR_RETURN(ncclRedOp_t reduction, ToNccl(op));
    return Finish(ncclReduce(in, out, count, type, reduction, root, comm_, native()), "ncclReduce");
  }
  absl::Status AllGather(const void* in, void* out, size_t count, DType dtype) override {
    LOCKSTEP_RETURN_IF_ERROR(Use("ncclAllGather"));
    LOCKSTEP_ASSIGN_OR_RETURN(ncclDataType_t type, ToNccl(dtype));
    return Finish(ncclAllGather(in, out, count, type, comm_, native()), "ncclAllGather");
  }
  absl::Status ReduceScatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op) override {
    LOCKSTEP_RETURN_IF_ERROR(Use("ncclReduceScatter"));
    LOCKSTEP_ASSIGN_OR_RETURN(ncclDataType_t type, ToNccl(dtype));
    LOCKSTEP_ASSIGN_OR_RETURN(ncclRedOp_t reduction, ToNccl(op));
    return Finish(ncclReduceScatter(in, out, count, type, reduction, comm_, native()), "ncclReduceScatter");
  }
  absl::Status Send(const void* buffer, size_t count, DType dtype, int peer) override {
    LOCKSTEP_RETURN_IF_ERROR(Use("ncclSend"));
    LOCKSTEP_ASSIGN_OR_RETURN(ncclDataType_t type, ToNccl(dtype));
    return Finish(ncclSend(buffer, count, type, peer, comm_, native()), "ncclSend");
  }
  absl::Status Recv(void* buffer, size_t count, DType dtype, int peer) override {
    LOCKSTEP_RETURN_IF_ERROR(Use("ncclRecv"));
    LOCKSTEP_ASSIGN_OR_RETURN(ncclDataType_t type, ToNccl(dtype));
    return Finish(ncclRecv(buffer, count, type, peer, comm_, native()), "ncclRecv");
  }
  absl::Status GroupStart() override { return FromNccl(ncclGroupStart(), "ncclGroupStart", comm_); }
  absl::Status GroupEnd() override {
    LOCKSTEP_RETURN_IF_ERROR(Use("ncclGroupEnd"));
    return Finish(ncclGroupEnd(), "ncclGroupEnd");
  }

  absl::Status Divide(void* data, size_t count, DType dtype, int divisor) override {
    return cuda::Divide(dtype, data, static_cast<int64_t>(count), divisor, device_, &stream_);
  }
  absl::Status Copy(void* dst, const void* src, size_t bytes) override {
    LOCKSTEP_RETURN_IF_ERROR(Use("cudaMemcpyAsync"));
    return FromCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, native()), "cudaMemcpyAsync");
  }
  absl::StatusOr<void*> Scratch(size_t bytes) override {
    if (bytes <= scratch_bytes_) return scratch_;
    LOCKSTEP_RETURN_IF_ERROR(Use("Scratch"));
    // Queued work may still read the old buffer.
    LOCKSTEP_RETURN_IF_ERROR(FromCuda(cudaStreamSynchronize(native()), "cudaStreamSynchronize"));
    if (scratch_ != nullptr) cudaFree(scratch_);
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    LOCKSTEP_RETURN_IF_ERROR(FromCuda(cudaMalloc(&scratch_, bytes), "cudaMalloc (NCCL scratch)"));
    scratch_bytes_ = bytes;
    return scratch_;
  }

  absl::StatusOr<std::unique_ptr<NcclEvent>> Record() override {
    LOCKSTEP_RETURN_IF_ERROR(Use("cudaEventRecord"));
    cudaEvent_t event = nullptr;
    LOCKSTEP_RETURN_IF_ERROR(FromCuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate"));
    auto owned = std::make_unique<CudaNcclEvent>(event);
    LOCKSTEP_RETURN_IF_ERROR(FromCuda(cudaEventRecord(event, native()), "cudaEventRecord"));
    return std::unique_ptr<NcclEvent>(std::move(owned));
  }

  absl::Status AsyncError() override {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (aborted_.load()) return absl::AbortedError("the NCCL communicator was aborted");
    ncclResult_t state = ncclSuccess;
    LOCKSTEP_RETURN_IF_ERROR(FromNccl(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", comm_));
    return FromNccl(state, "NCCL asynchronous error", comm_);
  }

  absl::StatusOr<std::unique_ptr<NcclComm>> Split(int color, int key, Deadline deadline) override {
    LOCKSTEP_RETURN_IF_ERROR(Use("ncclCommSplit"));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = non_blocking_ ? 0 : 1;
    // Without blocking, NCCL from 2.28 writes the new communicator only once
    // the split has finished, from its own thread (earlier versions wrote it
    // at once): the slot lives in this object, so a split given up at its
    // deadline cannot leave NCCL writing into a returned stack frame.
    split_child_ = nullptr;
    const ncclResult_t result =
        ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &split_child_, &config);
    if (color < 0) {
      LOCKSTEP_RETURN_IF_ERROR(AwaitReady(comm_, result, deadline, "ncclCommSplit"));
      return std::unique_ptr<NcclComm>();
    }
    if (result != ncclSuccess && result != ncclInProgress) return FromNccl(result, "ncclCommSplit", comm_);
    ncclComm_t child = nullptr;
    while ((child = __atomic_load_n(&split_child_, __ATOMIC_ACQUIRE)) == nullptr) {
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress) {
        return FromNccl(state, "ncclCommSplit", comm_);
      }
      if (SteadyClock::now() >= deadline) {
        ncclCommAbort(comm_);
        return absl::DeadlineExceededError(
            "ncclCommSplit did not complete by its deadline: a rank of the group did not call Split. Check that "
            "every rank of the group reaches the same Split (or NewGroup); or raise "
            "NcclCommunicatorOptions.init_timeout");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // The child's own state says when its set-up has finished.
    LOCKSTEP_RETURN_IF_ERROR(AwaitReady(child, ncclInProgress, deadline, "ncclCommSplit"));
    return Wrap(child, device_, non_blocking_);
  }

  // A communicator and its own stream and event, or the error (`comm` then destroyed).
  static absl::StatusOr<std::unique_ptr<NcclComm>> Wrap(ncclComm_t comm, int device, bool non_blocking) {
    absl::StatusOr<cuda::Stream> stream = cuda::Stream::Create(device);
    cudaEvent_t caller_event = nullptr;
    absl::Status status = stream.status();
    if (status.ok()) {
      status = FromCuda(cudaEventCreateWithFlags(&caller_event, cudaEventDisableTiming), "cudaEventCreate");
    }
    if (!status.ok()) {
      ncclCommDestroy(comm);
      return status;
    }
    return std::unique_ptr<NcclComm>(
        std::make_unique<CudaNcclComm>(comm, device, *std::move(stream), caller_event, non_blocking));
  }

  // A call made without blocking (init, split) answers ncclInProgress until
  // it finished; gives up at `deadline`, aborting `comm`.
  static absl::Status AwaitReady(ncclComm_t comm, ncclResult_t result, Deadline deadline, const char* call) {
    while (result == ncclInProgress) {
      if (SteadyClock::now() >= deadline) {
        ncclCommAbort(comm);
        return absl::DeadlineExceededError(
            absl::StrCat(call,
                         " did not complete by its deadline: a rank did not join. Check that every rank started, "
                         "reached the same store and uses its own GPU; or raise NcclCommunicatorOptions.init_timeout"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (ncclCommGetAsyncError(comm, &result) != ncclSuccess) break;
    }
    if (result != ncclSuccess) {
      absl::Status error = FromNccl(result, call, comm);
      if (comm != nullptr) ncclCommAbort(comm);
      return error;
    }
    return absl::OkStatus();
  }

  void Abort() override {
    // The lock keeps AsyncError (watchdog thread) off the freed communicator.
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (aborted_.exchange(true)) return;
    cudaSetDevice(device_);
    ncclCommAbort(comm_);
  }

 private:
  // A non-blocking communicator is finalized first (its pending work
  // flushed), for at most kCloseLimit; one that does not finish (a peer
  // died) is aborted instead of hanging the destructor.
  void Close() {
    if (!non_blocking_) {
      ncclCommDestroy(comm_);
      return;
    }
    constexpr std::chrono::seconds kCloseLimit(10);
    const Deadline give_up = SteadyClock::now() + kCloseLimit;
    ncclResult_t state = ncclCommFinalize(comm_);
    while (state == ncclInProgress && SteadyClock::now() < give_up) {
      std::this_thread::yield();
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
    }
    if (state == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }

  cudaStream_t native() const { return static_cast<cudaStream_t>(stream_.native()); }

  absl::Status Use(absl::string_view call) {
    if (aborted_.load()) return absl::AbortedError(absl::StrCat(call, ": the NCCL communicator was aborted"));
    return FromCuda(cudaSetDevice(device_), "cudaSetDevice");
  }

  // A non-blocking communicator may answer ncclInProgress: the call is then
  // finished in the background, and the next may only come after it.
  absl::Status Finish(ncclResult_t result, absl::string_view call) {
    LOCKSTEP_RETURN_IF_ERROR(FromNccl(result, call, comm_));
    if (result != ncclInProgress || !non_blocking_) return absl::OkStatus();
    for (;;) {
      if (aborted_.load()) return absl::AbortedError(absl::StrCat(call, ": the NCCL communicator was aborted"));
      ncclResult_t state = ncclSuccess;
      LOCKSTEP_RETURN_IF_ERROR(FromNccl(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", comm_));
      if (state != ncclInProgress) return FromNccl(state, call, comm_);
      std::this_thread::yield();
    }
  }

  ncclComm_t comm_;
  const int device_;
  cuda::Stream stream_;
  cudaEvent_t caller_event_;
  const bool non_blocking_;
  std::mutex abort_mu_;
  std::atomic<bool> aborted_{false};
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  ncclComm_t split_child_ = nullptr;  // where ncclCommSplit writes (Split)
};

class CudaNcclRuntime final : public NcclRuntime {
 public:
  int Version() override {
    int version = 0;
    return ncclGetVersion(&version) == ncclSuccess ? version : 0;
  }
  int DeviceCount() override { return cuda::DeviceCount(); }

  absl::StatusOr<std::string> DeviceId(int device) override {
    char bus[64] = {};
    LOCKSTEP_RETURN_IF_ERROR(FromCuda(cudaDeviceGetPCIBusId(bus, sizeof(bus), device), "cudaDeviceGetPCIBusId"));
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
    return absl::StrCat(host, "/", bus);
  }

  absl::StatusOr<std::string> NewUniqueId() override {
    ncclUniqueId id;
    LOCKSTEP_RETURN_IF_ERROR(FromNccl(ncclGetUniqueId(&id), "ncclGetUniqueId", nullptr));
    return std::string(id.internal, sizeof(id.internal));
  }

  absl::StatusOr<std::unique_ptr<NcclComm>> InitRank(const std::string& unique_id, int rank, int size, int device,
                                                     bool non_blocking, Deadline deadline) override {
    static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes, "ncclUniqueId changed size");
    if (unique_id.size() != kNcclUniqueIdBytes) {
      return absl::InvalidArgumentError(absl::StrCat("ncclCommInitRank: the unique id has ", unique_id.size(),
                                                     " bytes, expected ", kNcclUniqueIdBytes));
    }
    LOCKSTEP_RETURN_IF_ERROR(cuda::CheckDevice(device));
    LOCKSTEP_RETURN_IF_ERROR(FromCuda(cudaSetDevice(device), "cudaSetDevice"));
    ncclUniqueId id;
    std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
    ncclComm_t comm = nullptr;
    if (non_blocking) {
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      const ncclResult_t result = ncclCommInitRankConfig(&comm, size, id, rank, &config);
      LOCKSTEP_RETURN_IF_ERROR(CudaNcclComm::AwaitReady(comm, result, deadline, "ncclCommInitRankConfig"));
    } else {
      LOCKSTEP_RETURN_IF_ERROR(FromNccl(ncclCommInitRank(&comm, size, id, rank), "ncclCommInitRank", nullptr));
    }
    return CudaNcclComm::Wrap(comm, device, non_blocking);
  }
};

}  // namespace

std::unique_ptr<NcclRuntime> SystemNcclRuntime() { return std::make_unique<CudaNcclRuntime>(); }

}  // namespace lockstep
