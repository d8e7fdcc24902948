// The CUDA runtime as lockstep uses it: device discovery, streams, device and
// pinned host memory, copies, and the elementwise kernels.
//
// This header is the same whether or not lockstep was built with CUDA; the
// BUILD file picks the implementation. Without CUDA, `BuiltWithCuda()` is
// false, `DeviceCount()` is 0 and every other call returns
// FailedPrecondition, so callers need no #ifdef:
//
//   if (cuda::DeviceCount() == 0) return absl::OkStatus();  // or GTEST_SKIP()
//   LOCKSTEP_ASSIGN_OR_RETURN(cuda::Stream stream, cuda::Stream::Create(0));
//   LOCKSTEP_RETURN_IF_ERROR(t.CopyFromAsync(host, stream));
//   LOCKSTEP_RETURN_IF_ERROR(stream.Synchronize());
//
// Most users never call this directly: Tensor and the kernels in
// core/kernels.h dispatch on the tensor's device.
#ifndef LOCKSTEP_CORE_CUDA_CUDA_RUNTIME_H_
#define LOCKSTEP_CORE_CUDA_CUDA_RUNTIME_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/dtype.h"
#include "core/reduce_op.h"

namespace lockstep {
namespace cuda {

// True when this binary was compiled against the CUDA toolkit.
bool BuiltWithCuda();

// Visible CUDA devices; 0 without CUDA, without a driver or without a GPU.
int DeviceCount();

// OK when `device` is a visible device index; else an error saying how many
// devices there are.
absl::Status CheckDevice(int device);

// What DataParallel's balance check looks at (cudaGetDeviceProperties).
struct DeviceProperties {
  size_t total_memory = 0;
  int multiprocessors = 0;
};
absl::StatusOr<DeviceProperties> GetDeviceProperties(int device);

// An owned cudaStream_t (non-blocking) on one device. Movable, not copyable.
class Stream {
 public:
  static absl::StatusOr<Stream> Create(int device);

  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  // Waits for everything queued on the stream.
  absl::Status Synchronize();

  int device() const { return device_; }
  // The cudaStream_t, as void* so this header needs no CUDA include.
  void* native() const { return stream_; }

 private:
  Stream(void* stream, int device) : stream_(stream), device_(device) {}

  void* stream_ = nullptr;
  int device_ = -1;
};

// An owned cudaEvent_t (timing disabled) on one device: marks a point in a
// stream's work so the host can ask whether it has been reached without
// waiting (the pinned host pool's reuse rule). Movable, not copyable.
class Event {
 public:
  static absl::StatusOr<Event> Create(int device);

  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  // Marks the work queued so far on `stream`, which must be on the event's
  // device; nullptr: that device's legacy default stream (where stream-less
  // copies and kernels run).
  absl::Status Record(Stream* stream);
  // True once the recorded work has finished (or nothing was recorded);
  // false while it runs. Never blocks.
  absl::StatusOr<bool> Query() const;
  // Waits for the recorded work.
  absl::Status Synchronize() const;
  // Makes `stream` (nullptr: the event's device's legacy default stream, where
  // stream-less copies and kernels run) wait for the recorded work before it
  // runs anything queued on it afterwards; the host does not wait
  // (cudaStreamWaitEvent). How a copy made on a side stream is ordered before
  // the kernels that read it.
  absl::Status BlockStream(Stream* stream) const;

  int device() const { return device_; }

 private:
  Event(void* event, int device) : event_(event), device_(device) {}

  void* event_ = nullptr;  // cudaEvent_t
  int device_ = -1;
};

// Waits for all work on `device` (cudaDeviceSynchronize).
absl::Status DeviceSynchronize(int device);

// Device memory (cudaMalloc). Zero bytes returns nullptr.
absl::StatusOr<void*> DeviceAlloc(size_t bytes, int device);
void DeviceFree(void* ptr, int device);

// Page-locked host memory (cudaHostAlloc), for fast and async copies.
absl::StatusOr<void*> PinnedAlloc(size_t bytes);
void PinnedFree(void* ptr);

// Copies `bytes` between any two of host memory and device memory (unified
// addressing decides the direction). With a stream the copy is queued on it
// and the call returns at once; with nullptr it completes before returning.
absl::Status Copy(void* dst, const void* src, size_t bytes, int device, Stream* stream);

// Sets `bytes` of device memory to zero (same stream rule as Copy).
absl::Status Zero(void* dst, size_t bytes, int device, Stream* stream);

// Kernels on device pointers. The caller (core/kernels.h) validates
// dtypes, sizes and devices. With a nullptr stream they complete before
// returning.
//
// out[i] = op(inputs[0][i], ..., inputs[n-1][i]), accumulated as in
// core/internal/elementwise.h; at most kMaxReduceInputs inputs.
inline constexpr int kMaxReduceInputs = 64;
absl::Status Reduce(ReduceOp op, DType dtype, absl::Span<const void* const> inputs, void* out, int64_t count,
                    int device, Stream* stream);
absl::Status Scale(DType dtype, void* data, int64_t count, double factor, int device, Stream* stream);
absl::Status Divide(DType dtype, void* data, int64_t count, int divisor, int device, Stream* stream);
absl::Status Cast(DType from, const void* src, DType to, void* dst, int64_t count, int device, Stream* stream);
absl::StatusOr<bool> AllFinite(DType dtype, const void* data, int64_t count, int device, Stream* stream);

}  // namespace cuda
}  // namespace lockstep

#endif  // LOCKSTEP_CORE_CUDA_CUDA_RUNTIME_H_
