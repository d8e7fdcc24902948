#include "core/cuda_caching_allocator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"

namespace lockstep {
namespace {

class CudaSource final : public DeviceMemorySource {
 public:
  absl::StatusOr<void*> Allocate(size_t bytes, int device) override { return cuda::DeviceAlloc(bytes, device); }
  void Free(void* ptr, int device) override { cuda::DeviceFree(ptr, device); }
};

size_t RoundUp(size_t bytes, size_t multiple) { return (bytes + multiple - 1) / multiple * multiple; }

}  // namespace

std::unique_ptr<DeviceMemorySource> CudaDeviceMemory() { return std::make_unique<CudaSource>(); }

CudaCachingAllocator::CudaCachingAllocator(std::unique_ptr<DeviceMemorySource> source) : source_(std::move(source)) {}

CudaCachingAllocator::~CudaCachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  EmptyCacheLocked(-1);
  for (const auto& [ptr, block] : live_) source_->Free(ptr, block.device);
}

size_t CudaCachingAllocator::RoundSize(size_t bytes) {
  if (bytes == 0) return 0;
  return bytes <= kSmallLimitBytes ? RoundUp(bytes, kMinBlockBytes) : RoundUp(bytes, kLargeRoundBytes);
}

absl::StatusOr<void*> CudaCachingAllocator::Allocate(size_t bytes, int device) {
  if (bytes == 0) return nullptr;
  if (bytes > (SIZE_MAX >> 1)) {
    return absl::InvalidArgumentError(absl::StrCat("CudaCachingAllocator::Allocate on cuda:", device, ": ", bytes,
                                                   " bytes is not a possible size"));
  }
  const size_t size = RoundSize(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  DeviceMemoryStats& stats = stats_[device];
  void* ptr = nullptr;
  auto cached = cached_.find({device, size});
  if (cached != cached_.end() && !cached->second.empty()) {
    ptr = cached->second.back();
    cached->second.pop_back();
    ++stats.cache_hits;
  } else {
    absl::StatusOr<void*> fresh = source_->Allocate(size, device);
    if (!fresh.ok()) {
      // Blocks of other classes may be what stands in the way.
      EmptyCacheLocked(device);
      fresh = source_->Allocate(size, device);
    }
    if (!fresh.ok()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "CudaCachingAllocator::Allocate: cannot get ", size, " bytes (request ", bytes, ") on cuda:", device,
          " even after emptying the cache (", stats.allocated_bytes, " bytes allocated): ",
          fresh.status().message(), "; free tensors or use a smaller batch"));
    }
    ptr = *fresh;
    stats.reserved_bytes += size;
    stats.peak_reserved_bytes = std::max(stats.peak_reserved_bytes, stats.reserved_bytes);
  }
  live_.emplace(ptr, Block{size, device});
  ++stats.allocations;
  stats.allocated_bytes += size;
  stats.peak_allocated_bytes = std::max(stats.peak_allocated_bytes, stats.allocated_bytes);
  return ptr;
}

absl::Status CudaCachingAllocator::Free(void* ptr) {
  if (ptr == nullptr) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CudaCachingAllocator::Free: ", reinterpret_cast<uintptr_t>(ptr),
        " was not handed out by this allocator, or was freed already; free each block once, to its own allocator"));
  }
  const Block block = it->second;
  live_.erase(it);
  stats_[block.device].allocated_bytes -= block.bytes;
  cached_[{block.device, block.bytes}].push_back(ptr);
  return absl::OkStatus();
}

void CudaCachingAllocator::EmptyCache(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  EmptyCacheLocked(device);
}

void CudaCachingAllocator::EmptyCacheLocked(int device) {
  for (auto it = cached_.begin(); it != cached_.end();) {
    const auto [block_device, size] = it->first;
    if (device >= 0 && block_device != device) {
      ++it;
      continue;
    }
    for (void* ptr : it->second) source_->Free(ptr, block_device);
    stats_[block_device].reserved_bytes -= size * it->second.size();
    it = cached_.erase(it);
  }
}

DeviceMemoryStats CudaCachingAllocator::Stats(int device) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = stats_.find(device);
  return it == stats_.end() ? DeviceMemoryStats{} : it->second;
}

void CudaCachingAllocator::ResetPeak(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  DeviceMemoryStats& stats = stats_[device];
  stats.peak_allocated_bytes = stats.allocated_bytes;
  stats.peak_reserved_bytes = stats.reserved_bytes;
}

}  // namespace lockstep
