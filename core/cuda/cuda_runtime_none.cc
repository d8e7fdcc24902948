// cuda_runtime.h for builds without the CUDA toolkit: no devices, and every
// operation says how to get CUDA support.
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda/cuda_runtime.h"

namespace lockstep {
namespace cuda {
namespace {

absl::Status NotBuilt(absl::string_view operation) {
  return absl::FailedPreconditionError(
      absl::StrCat(operation,
                   ": lockstep was built without CUDA. Install the CUDA toolkit (or point CUDA_PATH at it) "
                   "and rebuild; `bazel build //...` then compiles the CUDA code automatically"));
}

}  // namespace

bool BuiltWithCuda() { return false; }
int DeviceCount() { return 0; }
absl::Status CheckDevice(int device) { return NotBuilt(absl::StrCat("CheckDevice(cuda:", device, ")")); }
absl::StatusOr<DeviceProperties> GetDeviceProperties(int device) {
  return NotBuilt(absl::StrCat("GetDeviceProperties(cuda:", device, ")"));
}

absl::StatusOr<Stream> Stream::Create(int device) { return NotBuilt("Stream::Create"); }
Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)), device_(other.device_) {}
Stream& Stream::operator=(Stream&& other) noexcept {
  stream_ = std::exchange(other.stream_, nullptr);
  device_ = other.device_;
  return *this;
}
Stream::~Stream() = default;
absl::Status Stream::Synchronize() { return NotBuilt("Stream::Synchronize"); }

absl::StatusOr<Event> Event::Create(int device) { return NotBuilt("Event::Create"); }
Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)), device_(other.device_) {}
Event& Event::operator=(Event&& other) noexcept {
  event_ = std::exchange(other.event_, nullptr);
  device_ = other.device_;
  return *this;
}
Event::~Event() = default;
absl::Status Event::Record(Stream*) { return NotBuilt("Event::Record"); }
absl::StatusOr<bool> Event::Query() const { return NotBuilt("Event::Query"); }
absl::Status Event::Synchronize() const { return NotBuilt("Event::Synchronize"); }
absl::Status Event::BlockStream(Stream*) const { return NotBuilt("Event::BlockStream"); }
absl::Status DeviceSynchronize(int device) { return NotBuilt(absl::StrCat("DeviceSynchronize(cuda:", device, ")")); }

absl::StatusOr<void*> DeviceAlloc(size_t, int) { return NotBuilt("DeviceAlloc"); }
void DeviceFree(void*, int) {}
absl::StatusOr<void*> PinnedAlloc(size_t) { return NotBuilt("PinnedAlloc"); }
void PinnedFree(void*) {}
absl::Status Copy(void*, const void*, size_t, int, Stream*) { return NotBuilt("Copy"); }
absl::Status Zero(void*, size_t, int, Stream*) { return NotBuilt("Zero"); }
absl::Status Reduce(ReduceOp, DType, absl::Span<const void* const>, void*, int64_t, int, Stream*) {
  return NotBuilt("Reduce");
}
absl::Status Scale(DType, void*, int64_t, double, int, Stream*) { return NotBuilt("Scale"); }
absl::Status Divide(DType, void*, int64_t, int, int, Stream*) { return NotBuilt("Divide"); }
absl::Status Cast(DType, const void*, DType, void*, int64_t, int, Stream*) { return NotBuilt("Cast"); }
absl::StatusOr<bool> AllFinite(DType, const void*, int64_t, int, Stream*) { return NotBuilt("AllFinite"); }

}  // namespace cuda
}  // namespace lockstep
