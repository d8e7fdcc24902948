// cuda_runtime.h on top of the CUDA runtime API.
#include <cuda_runtime_api.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda/cuda_kernel_launch.h"
#include "core/cuda/cuda_runtime.h"
#include "core/status.h"

namespace lockstep {
namespace cuda {
namespace {

static_assert(kMaxReduceInputs == cuda_internal::kMaxReduceInputs, "keep in sync");

absl::Status FromCuda(cudaError_t err, absl::string_view operation) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(operation, " failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
}

absl::Status FromCuda(int err, absl::string_view operation) {
  return FromCuda(static_cast<cudaError_t>(err), operation);
}

// Makes `device` current for the calling thread for the duration of a call.
absl::Status UseDevice(int device, absl::string_view operation) {
  LOCKSTEP_RETURN_IF_ERROR(CheckDevice(device));
  return FromCuda(cudaSetDevice(device), absl::StrCat(operation, ": cudaSetDevice(", device, ")"));
}

absl::Status Finish(int launch_error, Stream* stream, absl::string_view operation) {
  LOCKSTEP_RETURN_IF_ERROR(FromCuda(launch_error, operation));
  if (stream != nullptr) return absl::OkStatus();
  return FromCuda(cudaStreamSynchronize(nullptr), operation);
}

void* NativeStream(Stream* stream) { return stream == nullptr ? nullptr : stream->native(); }

}  // namespace

bool BuiltWithCuda() { return true; }

int DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // Clear the sticky "no driver/device" error.
    return 0;
  }
  return count;
}

absl::StatusOr<DeviceProperties> GetDeviceProperties(int device) {
  LOCKSTEP_RETURN_IF_ERROR(CheckDevice(device));
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return absl::InternalError(absl::StrCat("cudaGetDeviceProperties(cuda:", device, ") failed"));
  }
  return DeviceProperties{prop.totalGlobalMem, prop.multiProcessorCount};
}

absl::Status CheckDevice(int device) {
  const int count = DeviceCount();
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(absl::StrCat("cuda:", device, " does not exist: this process sees ", count,
                                                   " CUDA device(s). Check CUDA_VISIBLE_DEVICES and the device index"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Stream> Stream::Create(int device) {
  LOCKSTEP_RETURN_IF_ERROR(UseDevice(device, "Stream::Create"));
  cudaStream_t stream = nullptr;
  LOCKSTEP_RETURN_IF_ERROR(
      FromCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "Stream::Create: cudaStreamCreateWithFlags"));
  return Stream(stream, device);
}

Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)), device_(other.device_) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
    stream_ = std::exchange(other.stream_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

Stream::~Stream() {
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

absl::Status Stream::Synchronize() {
  return FromCuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)),
                  absl::StrCat("Stream::Synchronize on cuda:", device_));
}

absl::StatusOr<Event> Event::Create(int device) {
  LOCKSTEP_RETURN_IF_ERROR(UseDevice(device, "Event::Create"));
  cudaEvent_t event = nullptr;
  LOCKSTEP_RETURN_IF_ERROR(FromCuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                                    absl::StrCat("Event::Create on cuda:", device)));
  return Event(event, device);
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)), device_(other.device_) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
    event_ = std::exchange(other.event_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

Event::~Event() {
  if (event_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

absl::Status Event::Record(Stream* stream) {
  if (stream != nullptr && stream->device() != device_) {
    return absl::InvalidArgumentError(
        absl::StrCat("Event::Record: the event is on cuda:", device_, " but the stream on cuda:", stream->device()));
  }
  // cudaStreamLegacy is the current device's legacy stream: make it ours.
  LOCKSTEP_RETURN_IF_ERROR(UseDevice(device_, "Event::Record"));
  cudaStream_t s = stream == nullptr ? cudaStreamLegacy : static_cast<cudaStream_t>(stream->native());
  return FromCuda(cudaEventRecord(static_cast<cudaEvent_t>(event_), s),
                  absl::StrCat("Event::Record on cuda:", device_));
}

absl::StatusOr<bool> Event::Query() const {
  const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event_));
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) {
    cudaGetLastError();  // Not an error; keep it from showing up in the next call.
    return false;
  }
  return FromCuda(err, absl::StrCat("Event::Query on cuda:", device_));
}

absl::Status Event::Synchronize() const {
  return FromCuda(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)),
                  absl::StrCat("Event::Synchronize on cuda:", device_));
}

absl::Status Event::BlockStream(Stream* stream) const {
  if (stream != nullptr && stream->device() != device_) {
    return absl::InvalidArgumentError(absl::StrCat("Event::BlockStream: the event is on cuda:", device_,
                                                   " but the stream on cuda:", stream->device()));
  }
  LOCKSTEP_RETURN_IF_ERROR(UseDevice(device_, "Event::BlockStream"));
  cudaStream_t s = stream == nullptr ? cudaStreamLegacy : static_cast<cudaStream_t>(stream->native());
  return FromCuda(cudaStreamWaitEvent(s, static_cast<cudaEvent_t>(event_), 0),
                  absl::StrCat("Event::BlockStream on cuda:", device_));
}

absl::Status DeviceSynchronize(int device) {
  LOCKSTEP_RETURN_IF_ERROR(UseDevice(device, "DeviceSynchronize"));
  return FromCuda(cudaDeviceSynchronize(), absl::StrCat("DeviceSynchronize on cuda:", device));
}

absl::StatusOr<void*> DeviceAlloc(size_t bytes, int device) {
  if (bytes == 0) return nullptr;
  LOCKSTEP_RETURN_IF_ERROR(UseDevice(device, "DeviceAlloc"));
  void* ptr = nullptr;
  const cudaError_t err = cudaMalloc(&ptr, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat("DeviceAlloc: cudaMalloc of ", bytes, " bytes on cuda:", device,
                                                     " failed: ", cudaGetErrorString(err),
                                                     ". Free memory or use a smaller batch/bucket"));
  }
  return ptr;
}

void DeviceFree(void* ptr, int device) {
  if (ptr == nullptr) return;
  cudaSetDevice(device);
  cudaFree(ptr);
}

absl::StatusOr<void*> PinnedAlloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* ptr = nullptr;
  const cudaError_t err = cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable);
  if (err != cudaSuccess) {
    cudaGetLastError();
    if (err == cudaErrorMemoryAllocation) {
      // ResourceExhausted, as DeviceAlloc's: the pinned pool then empties its cache and retries.
      return absl::ResourceExhaustedError(
          absl::StrCat("PinnedAlloc: cudaHostAlloc of ", bytes, " bytes failed: ", cudaGetErrorString(err)));
    }
    return FromCuda(err, absl::StrCat("PinnedAlloc: cudaHostAlloc of ", bytes, " bytes"));
  }
  return ptr;
}

void PinnedFree(void* ptr) {
  if (ptr != nullptr) cudaFreeHost(ptr);
}

absl::Status Copy(void* dst, const void* src, size_t bytes, int device, Stream* stream) {
  if (bytes == 0) return absl::OkStatus();
  LOCKSTEP_RETURN_IF_ERROR(UseDevice(device, "Copy"));
  cudaStream_t s = static_cast<cudaStream_t>(NativeStream(stream));
  LOCKSTEP_RETURN_IF_ERROR(FromCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s), "Copy: cudaMemcpyAsync"));
  return Finish(0, stream, "Copy");
}

absl::Status Zero(void* dst, size_t bytes, int device, Stream* stream) {
  if (bytes == 0) return absl::OkStatus();
  LOCKSTEP_RETURN_IF_ERROR(UseDevice(device, "Zero"));
  cudaStream_t s = static_cast<cudaStream_t>(NativeStream(stream));
  LOCKSTEP_RETURN_IF_ERROR(FromCuda(cudaMemsetAsync(dst, 0, bytes, s), "Zero: cudaMemsetAsync"));
  return Finish(0, stream, "Zero");
}

absl::Status Reduce(ReduceOp op, DType dtype, absl::Span<const void* const> inputs, void* out, int64_t count,
                    int device, Stream* stream) {
  LOCKSTEP_RETURN_IF_ERROR(UseDevice(device, "Reduce"));
  const int err = cuda_internal::LaunchReduce(static_cast<int>(op), static_cast<int>(dtype), inputs.data(),
                                              static_cast<int>(inputs.size()), out, count, NativeStream(stream));
  return Finish(err, stream, "Reduce kernel");
}

absl::Status Scale(DType dtype, void* data, int64_t count, double factor, int device, Stream* stream) {
  LOCKSTEP_RETURN_IF_ERROR(UseDevice(device, "Scale"));
  const int err = cuda_internal::LaunchScale(static_cast<int>(dtype), data, count, factor, NativeStream(stream));
  return Finish(err, stream, "Scale kernel");
}

absl::Status Divide(DType dtype, void* data, int64_t count, int divisor, int device, Stream* stream) {
  LOCKSTEP_RETURN_IF_ERROR(UseDevice(device, "Divide"));
  const int err = cuda_internal::LaunchDivide(static_cast<int>(dtype), data, count, divisor, NativeStream(stream));
  return Finish(err, stream, "Divide kernel");
}

absl::Status Cast(DType from, const void* src, DType to, void* dst, int64_t count, int device, Stream* stream) {
  LOCKSTEP_RETURN_IF_ERROR(UseDevice(device, "Cast"));
  const int err =
      cuda_internal::LaunchCast(static_cast<int>(from), src, static_cast<int>(to), dst, count, NativeStream(stream));
  return Finish(err, stream, "Cast kernel");
}

absl::StatusOr<bool> AllFinite(DType dtype, const void* data, int64_t count, int device, Stream* stream) {
  LOCKSTEP_RETURN_IF_ERROR(UseDevice(device, "AllFinite"));
  LOCKSTEP_ASSIGN_OR_RETURN(void* flag, DeviceAlloc(sizeof(int), device));
  cudaStream_t s = static_cast<cudaStream_t>(NativeStream(stream));
  int found = 0;
  absl::Status status =
      FromCuda(cuda_internal::LaunchAllFinite(static_cast<int>(dtype), data, count, static_cast<int*>(flag), s),
               "AllFinite kernel");
  if (status.ok()) {
    status =
        FromCuda(cudaMemcpyAsync(&found, flag, sizeof(found), cudaMemcpyDeviceToHost, s), "AllFinite: cudaMemcpyAsync");
  }
  // The answer is needed on the host, so this always waits for the stream.
  if (status.ok()) status = FromCuda(cudaStreamSynchronize(s), "AllFinite: cudaStreamSynchronize");
  DeviceFree(flag, device);
  if (!status.ok()) return status;
  return found == 0;
}

}  // namespace cuda
}  // namespace lockstep
