#include "core/storage.h"

#include <sys/mman.h>

#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda/cuda_caching_allocator.h"
#include "core/cuda/cuda_runtime.h"
#include "core/status.h"

namespace lockstep {
namespace {

constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr size_t kHugePageThreshold = size_t{2} << 20;

}  // namespace

absl::StatusOr<std::shared_ptr<Storage>> Storage::Allocate(size_t nbytes, Device device, bool pinned) {
  void* data = nullptr;
  if (device.is_cuda()) {
    LOCKSTEP_ASSIGN_OR_RETURN(data, DefaultCudaAllocator().Allocate(nbytes, device.index()));
    return std::shared_ptr<Storage>(new Storage(data, nbytes, device, false));
  }
  if (nbytes == 0) return std::shared_ptr<Storage>(new Storage(nullptr, 0, device, false));
  if (pinned && cuda::DeviceCount() > 0) {
    absl::StatusOr<void*> pinned_data = DefaultPinnedHostAllocator().Allocate(nbytes, kHostDevice);
    if (pinned_data.ok()) {
      return std::shared_ptr<Storage>(new Storage(*pinned_data, nbytes, device, true));
    }
    // Pinning is an optimization: fall back to pageable memory.
  }
  const size_t rounded = (nbytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  if (rounded < nbytes) {
    return absl::InvalidArgumentError(absl::StrCat("Storage::Allocate: ", nbytes, " bytes is too large"));
  }
  // Large buffers (gradient buckets, collective scratch, batches) on
  // transparent huge pages: copies through them run faster, because the
  // kernel's and the CPU's page walks (process_vm_readv pins every page it
  // copies) go 512x less often. In THP's "madvise" mode only advised
  // memory gets them; "never" simply ignores the advice.
  const bool huge = rounded >= kHugePageThreshold && std::getenv("LOCKSTEP_NO_HUGE_PAGES") == nullptr;
  if (huge) {
    const size_t huge_rounded = (rounded + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    data = std::aligned_alloc(kHugePageBytes, huge_rounded);
    // Advised over the whole huge pages inside the request only: a huge
    // page behind the last byte would be resident whole once that byte is
    // touched (2 MiB more for an 8.01 MiB tensor); the tail stays on
    // ordinary pages.
    const size_t advised = nbytes / kHugePageBytes * kHugePageBytes;
    if (data != nullptr && advised > 0) (void)::madvise(data, advised, MADV_HUGEPAGE);
  } else {
    data = std::aligned_alloc(kHostAlignment, rounded);
  }
  if (data == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("Storage::Allocate: could not allocate ", nbytes,
                                                     " bytes of host memory on ", device.ToString(),
                                                     "; reduce the batch or bucket size"));
  }
  return std::shared_ptr<Storage>(new Storage(data, nbytes, device, false));
}

absl::StatusOr<std::shared_ptr<Storage>> Storage::Wrap(void* data, size_t nbytes, Device device,
                                                       std::shared_ptr<const void> keep_alive) {
  if (keep_alive == nullptr) {
    return absl::InvalidArgumentError("Storage::Wrap: keep_alive is null; it must own the wrapped memory");
  }
  if (data == nullptr && nbytes > 0) {
    return absl::InvalidArgumentError(absl::StrCat("Storage::Wrap: null data for ", nbytes, " bytes"));
  }
  std::shared_ptr<Storage> s(new Storage(nbytes > 0 ? data : nullptr, nbytes, device, false));
  s->keep_alive_ = std::move(keep_alive);
  return s;
}

absl::Status Storage::Release() {
  if (keep_alive_ != nullptr) {
    return absl::FailedPreconditionError(
        "Storage::Release: the memory is wrapped (another library owns it); release its owner instead");
  }
  if (released_) return absl::OkStatus();
  FreeData();
  data_ = nullptr;
  released_ = true;
  return absl::OkStatus();
}

absl::Status Storage::Restore() {
  if (!released_) return absl::OkStatus();
  LOCKSTEP_ASSIGN_OR_RETURN(std::shared_ptr<Storage> fresh, Allocate(nbytes_, device_, pinned_));
  // Adopt the fresh block: it is freed by this Storage from now on.
  data_ = std::exchange(fresh->data_, nullptr);
  pinned_ = fresh->pinned_;
  released_ = false;
  return absl::OkStatus();
}

Storage::~Storage() { FreeData(); }

void Storage::FreeData() {
  if (data_ == nullptr || keep_alive_ != nullptr) return;
  if (device_.is_cuda()) {
    // Cannot fail: the block came from this allocator and is freed once.
    DefaultCudaAllocator().Free(data_).IgnoreError();
  } else if (pinned_) {
    DefaultPinnedHostAllocator().Free(data_).IgnoreError();
  } else {
    std::free(data_);
  }
}

}  // namespace lockstep
