// CudaCachingAllocator: device memory reused by size class, as PyTorch's
// CUDA caching allocator does in its simplest form. cudaMalloc/cudaFree
// synchronize the device and cost tens of microseconds; a training step
// allocates the same sizes every step, so freed blocks are kept per
// (device, size class) and handed out again. The same class, over
// PinnedHostMemory(), is the pinned host pool (cudaHostAlloc/cudaFreeHost
// are slower still), as PyTorch's CachingHostAllocator.
//
//   CudaCachingAllocator& allocator = DefaultCudaAllocator();  // the process's
//   LOCKSTEP_ASSIGN_OR_RETURN(void* p, allocator.Allocate(bytes, /*device=*/0));
//   ...
//   LOCKSTEP_RETURN_IF_ERROR(allocator.Free(p));          // back to the cache
//   DeviceMemoryStats s = allocator.Stats(0);             // current and peak bytes
//   allocator.EmptyCache();                               // cached blocks to cudaFree
//
// Size classes (RoundSize): requests up to 1 MiB round up to a multiple of
// 512 bytes, larger ones to a multiple of 2 MiB (PyTorch's kMinBlockSize and
// kRoundLarge). A block is reused only for its own class, never split, so
// reuse wastes at most the rounding. When the source runs out of memory
// (ResourceExhausted), the allocator empties that device's cache and tries
// once more; other source errors (a bad device index, no CUDA) come back
// unchanged.
//
// When a block may be reused is the source's call (DeviceMemorySource::
// OnFree). Device memory (CudaDeviceMemory) is reused at once: the caller
// must have synchronized work that still uses a block before freeing it (as
// with cudaFree's implicit synchronization, which the cache no longer
// gives). Pinned host memory is read and written by asynchronous copies
// that the host does not wait for, so PinnedHostMemory fences each freed
// block with CUDA events and the block waits in the cache until they have
// completed; an allocation of its class meanwhile takes another block or a
// new one.
//
// The allocator must outlive its blocks; its destructor returns every block
// to the source (the default allocators are never destroyed). Thread-safe.
#ifndef LOCKSTEP_CORE_CUDA_CUDA_CACHING_ALLOCATOR_H_
#define LOCKSTEP_CORE_CUDA_CUDA_CACHING_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lockstep {

// Tells when a freed block may be handed out again.
class ReuseFence {
 public:
  virtual ~ReuseFence() = default;
  // True once no work queued before the free can still touch the block.
  // Must not block; called with the allocator's lock held.
  virtual bool Done() = 0;
};

// Where the allocator gets memory and returns it. `device` is a CUDA device
// index, or kHostDevice for pinned host memory.
class DeviceMemorySource {
 public:
  virtual ~DeviceMemorySource() = default;
  virtual absl::StatusOr<void*> Allocate(size_t bytes, int device) = 0;
  virtual void Free(void* ptr, int device) = 0;
  // Called (without the allocator's lock) when a block is freed to the
  // cache. nullptr, the default, means it may be reused at once.
  virtual std::unique_ptr<ReuseFence> OnFree(void* ptr, int device) { return nullptr; }
};

// The `device` of pinned host memory in the allocator's calls and Stats.
inline constexpr int kHostDevice = -1;

// cudaMalloc/cudaFree through core/cuda/cuda_runtime.h (errors without CUDA).
// Freed blocks are reusable at once.
std::unique_ptr<DeviceMemorySource> CudaDeviceMemory();

// cudaHostAlloc (portable)/cudaFreeHost through core/cuda/cuda_runtime.h, for
// `device` kHostDevice. A freed block is fenced by one CUDA event per device
// in `fence_devices()`, recorded on that device's legacy default stream
// (where core's kernels and stream-less copies run); the block is reused once
// every event has completed. Work the caller queued on its own
// cuda::Stream (those are non-blocking, so the legacy stream does not order
// them) is not covered: synchronize that stream, or keep the block's owner
// alive, until such work is done. The devices are asked for at each free
// rather than fixed, and are the ones the process uses: recording on every
// visible device would create a CUDA context on GPUs this rank never
// touches. If an event cannot be created or recorded, the free waits for
// that device instead (cudaDeviceSynchronize).
std::unique_ptr<DeviceMemorySource> PinnedHostMemory(std::function<std::vector<int>()> fence_devices);

// Per device, in bytes of size classes (what the source holds). Blocks
// waiting for their fence count as reserved, not allocated.
struct DeviceMemoryStats {
  size_t allocated_bytes = 0;       // Handed out, not yet freed.
  size_t peak_allocated_bytes = 0;  // Since creation or ResetPeak.
  size_t reserved_bytes = 0;        // Held from the source: handed out + cached.
  size_t peak_reserved_bytes = 0;
  uint64_t allocations = 0;  // Allocate calls that returned a block.
  uint64_t cache_hits = 0;   // Of those, served from the cache.
};

class CudaCachingAllocator {
 public:
  static constexpr size_t kMinBlockBytes = 512;
  static constexpr size_t kSmallLimitBytes = size_t{1} << 20;  // 1 MiB
  static constexpr size_t kLargeRoundBytes = size_t{2} << 20;  // 2 MiB

  explicit CudaCachingAllocator(std::unique_ptr<DeviceMemorySource> source = CudaDeviceMemory());
  ~CudaCachingAllocator();
  CudaCachingAllocator(const CudaCachingAllocator&) = delete;
  CudaCachingAllocator& operator=(const CudaCachingAllocator&) = delete;

  // The size class of a request of `bytes` (0 for 0).
  static size_t RoundSize(size_t bytes);

  // A block of at least `bytes` on `device`; nullptr for 0 bytes.
  absl::StatusOr<void*> Allocate(size_t bytes, int device);
  // Returns a block to the cache. nullptr is ignored; a pointer this
  // allocator did not hand out (or freed twice) is InvalidArgument.
  absl::Status Free(void* ptr);
  // Returns every cached (free) block of `device` (-1: all devices, which for
  // the pinned pool is its one "device", kHostDevice) to the source. Blocks
  // whose fence has not completed stay cached.
  void EmptyCache(int device = -1);

  DeviceMemoryStats Stats(int device) const;
  // Peaks restart from the current values.
  void ResetPeak(int device);
  // The devices this allocator has handed out blocks on, ascending.
  std::vector<int> UsedDevices() const;

 private:
  struct Block {
    size_t bytes;
    int device;
  };
  struct CachedBlock {
    void* ptr;
    std::unique_ptr<ReuseFence> fence;  // nullptr: reusable.
  };
  // Called with mu_ held. `even_pending`: also blocks whose fence is not
  // done (the destructor; the source must cope, as cudaFreeHost does by
  // synchronizing).
  void EmptyCacheLocked(int device, bool even_pending = false);

  std::unique_ptr<DeviceMemorySource> source_;
  mutable std::mutex mu_;  // Guards everything below.
  std::unordered_map<void*, Block> live_;
  std::map<std::pair<int, size_t>, std::vector<CachedBlock>> cached_;  // (device, size class) -> blocks
  std::map<int, DeviceMemoryStats> stats_;
};

// The process's allocator of CUDA device memory (over CudaDeviceMemory()),
// which Storage uses for every CUDA tensor. Created on first use and never
// destroyed: tensors held by other static objects or by threads still
// running at exit may free blocks after static destructors have run, and
// cudaFree during exit may find the CUDA runtime already torn down. The
// driver reclaims the memory when the process ends. This and the pinned pool
// are the only process-wide objects in lockstep, as in PyTorch.
CudaCachingAllocator& DefaultCudaAllocator();

// The process's pinned host pool (PinnedHostMemory() fenced on
// DefaultCudaAllocator().UsedDevices()), which Storage uses for pinned host
// tensors; device kHostDevice. Never destroyed, for the same reasons.
CudaCachingAllocator& DefaultPinnedHostAllocator();

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_CUDA_CUDA_CACHING_ALLOCATOR_H_
