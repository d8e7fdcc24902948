#include "core/cuda/cuda_caching_allocator.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/cuda/cuda_runtime.h"

namespace lockstep {
namespace {

class CudaSource final : public DeviceMemorySource {
 public:
  absl::StatusOr<void*> Allocate(size_t bytes, int device) override { return cuda::DeviceAlloc(bytes, device); }
  void Free(void* ptr, int device) override { cuda::DeviceFree(ptr, device); }
};

// Done once every event has completed.
class EventFence final : public ReuseFence {
 public:
  explicit EventFence(std::vector<cuda::Event> events) : events_(std::move(events)) {}
  bool Done() override {
    while (!events_.empty()) {
      absl::StatusOr<bool> done = events_.back().Query();
      // A failed query means the device hit an error that ends its work (CUDA
      // errors there are sticky); keeping the block forever would only leak it.
      if (done.ok() && !*done) return false;
      events_.pop_back();  // Destroys the event as soon as it has served.
    }
    return true;
  }

 private:
  std::vector<cuda::Event> events_;
};

class PinnedSource final : public DeviceMemorySource {
 public:
  explicit PinnedSource(std::function<std::vector<int>()> fence_devices) : fence_devices_(std::move(fence_devices)) {}
  absl::StatusOr<void*> Allocate(size_t bytes, int device) override { return cuda::PinnedAlloc(bytes); }
  void Free(void* ptr, int device) override { cuda::PinnedFree(ptr); }
  std::unique_ptr<ReuseFence> OnFree(void* ptr, int device) override {
    std::vector<cuda::Event> events;
    for (int d : fence_devices_()) {
      absl::StatusOr<cuda::Event> event = cuda::Event::Create(d);
      absl::Status recorded = event.ok() ? event->Record(nullptr) : event.status();
      if (recorded.ok()) {
        events.push_back(*std::move(event));
      } else {
        // No event, no way to know later: wait now. Ignoring a failure here
        // is all that is left (Free cannot fail for a block it handed out).
        cuda::DeviceSynchronize(d).IgnoreError();
      }
    }
    if (events.empty()) return nullptr;
    return std::make_unique<EventFence>(std::move(events));
  }

 private:
  std::function<std::vector<int>()> fence_devices_;
};

size_t RoundUp(size_t bytes, size_t multiple) { return (bytes + multiple - 1) / multiple * multiple; }

std::string Where(int device) {
  return device == kHostDevice ? std::string("pinned host memory") : absl::StrCat("cuda:", device);
}

}  // namespace

std::unique_ptr<DeviceMemorySource> CudaDeviceMemory() { return std::make_unique<CudaSource>(); }

std::unique_ptr<DeviceMemorySource> PinnedHostMemory(std::function<std::vector<int>()> fence_devices) {
  return std::make_unique<PinnedSource>(std::move(fence_devices));
}

CudaCachingAllocator::CudaCachingAllocator(std::unique_ptr<DeviceMemorySource> source) : source_(std::move(source)) {}

CudaCachingAllocator::~CudaCachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  EmptyCacheLocked(-1, /*even_pending=*/true);
  for (const auto& [ptr, block] : live_) source_->Free(ptr, block.device);
}

size_t CudaCachingAllocator::RoundSize(size_t bytes) {
  if (bytes == 0) return 0;
  return bytes <= kSmallLimitBytes ? RoundUp(bytes, kMinBlockBytes) : RoundUp(bytes, kLargeRoundBytes);
}

absl::StatusOr<void*> CudaCachingAllocator::Allocate(size_t bytes, int device) {
  if (bytes == 0) return nullptr;
  if (bytes > (SIZE_MAX >> 1)) {
    return absl::InvalidArgumentError(absl::StrCat("CudaCachingAllocator::Allocate on ", Where(device), ": ", bytes,
                                                   " bytes is not a possible size"));
  }
  const size_t size = RoundSize(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* ptr = nullptr;
  bool hit = false;
  auto cached = cached_.find({device, size});
  if (cached != cached_.end()) {
    // Newest first (warmest in cache); a block whose fence is pending is skipped.
    std::vector<CachedBlock>& blocks = cached->second;
    for (size_t i = blocks.size(); i-- > 0;) {
      CachedBlock& b = blocks[i];
      if (b.fence != nullptr && !b.fence->Done()) continue;
      ptr = b.ptr;
      blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(i));
      hit = true;
      break;
    }
  }
  if (!hit) {
    absl::StatusOr<void*> fresh = source_->Allocate(size, device);
    if (fresh.status().code() == absl::StatusCode::kResourceExhausted) {
      // Blocks of other classes may be what stands in the way.
      EmptyCacheLocked(device);
      fresh = source_->Allocate(size, device);
      if (fresh.status().code() == absl::StatusCode::kResourceExhausted) {
        auto it = stats_.find(device);
        return absl::ResourceExhaustedError(absl::StrCat(
            "CudaCachingAllocator::Allocate: cannot get ", size, " bytes (request ", bytes, ") on ", Where(device),
            " even after emptying the cache (", it == stats_.end() ? 0 : it->second.allocated_bytes,
            " bytes allocated): ", fresh.status().message(), "; free tensors or use a smaller batch"));
      }
    }
    // Anything else (no such device, no CUDA) is the caller's to see as is.
    if (!fresh.ok()) return fresh.status();
    ptr = *fresh;
  }
  DeviceMemoryStats& stats = stats_[device];
  if (hit) {
    ++stats.cache_hits;
  } else {
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
  Block block{};
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(ptr);
    if (it == live_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CudaCachingAllocator::Free: ", reinterpret_cast<uintptr_t>(ptr),
          " was not handed out by this allocator, or was freed already; free each block once, to its own allocator"));
    }
    block = it->second;
    live_.erase(it);  // Now a second Free of ptr fails, even before it is cached.
  }
  // Outside the lock: recording events takes a CUDA call per device.
  std::unique_ptr<ReuseFence> fence = source_->OnFree(ptr, block.device);
  std::lock_guard<std::mutex> lock(mu_);
  stats_[block.device].allocated_bytes -= block.bytes;
  cached_[{block.device, block.bytes}].push_back(CachedBlock{ptr, std::move(fence)});
  return absl::OkStatus();
}

void CudaCachingAllocator::EmptyCache(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  EmptyCacheLocked(device);
}

void CudaCachingAllocator::EmptyCacheLocked(int device, bool even_pending) {
  for (auto it = cached_.begin(); it != cached_.end();) {
    const auto [block_device, size] = it->first;
    if (device >= 0 && block_device != device) {
      ++it;
      continue;
    }
    std::vector<CachedBlock>& blocks = it->second;
    size_t kept = 0;
    for (CachedBlock& b : blocks) {
      if (!even_pending && b.fence != nullptr && !b.fence->Done()) {
        blocks[kept++] = std::move(b);
        continue;
      }
      source_->Free(b.ptr, block_device);
      stats_[block_device].reserved_bytes -= size;
    }
    blocks.resize(kept);
    it = blocks.empty() ? cached_.erase(it) : std::next(it);
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

std::vector<int> CudaCachingAllocator::UsedDevices() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> devices;
  for (const auto& [device, stats] : stats_) {
    if (stats.allocations > 0) devices.push_back(device);  // std::map: ascending.
  }
  return devices;
}

CudaCachingAllocator& DefaultCudaAllocator() {
  static CudaCachingAllocator* const allocator = new CudaCachingAllocator(CudaDeviceMemory());
  return *allocator;
}

CudaCachingAllocator& DefaultPinnedHostAllocator() {
  static CudaCachingAllocator* const allocator =
      new CudaCachingAllocator(PinnedHostMemory([] { return DefaultCudaAllocator().UsedDevices(); }));
  return *allocator;
}

}  // namespace lockstep
