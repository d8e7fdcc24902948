// CudaCachingAllocator: device memory reused by size class, as PyTorch's
// CUDA caching allocator does in its simplest form. cudaMalloc/cudaFree
// synchronize the device and cost tens of microseconds; a training step
// allocates the same sizes every step, so freed blocks are kept per
// (device, size class) and handed out again.
//
//   CudaCachingAllocator allocator;                       // over cudaMalloc
//   LOCKSTEP_ASSIGN_OR_RETURN(void* p, allocator.Allocate(bytes, /*device=*/0));
//   ...
//   LOCKSTEP_RETURN_IF_ERROR(allocator.Free(p));          // back to the cache
//   DeviceMemoryStats s = allocator.Stats(0);             // current and peak bytes
//   allocator.EmptyCache();                               // cached blocks to cudaFree
//
// Size classes (RoundSize): requests up to 1 MiB round up to a multiple of
// 512 bytes, larger ones to a multiple of 2 MiB (PyTorch's kMinBlockSize and
// kRoundLarge). A block is reused only for its own class, never split, so
// reuse wastes at most the rounding. When the source fails (out of memory),
// the allocator empties that device's cache and tries once more.
//
// Freed blocks are reused at once: the caller must have synchronized work
// that still uses a block before freeing it (as with cudaFree's implicit
// synchronization, which the cache no longer gives). The allocator must
// outlive its blocks; its destructor returns every block to the source.
// Thread-safe.
#ifndef LOCKSTEP_CORE_CUDA_CACHING_ALLOCATOR_H_
#define LOCKSTEP_CORE_CUDA_CACHING_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lockstep {

// Where the allocator gets device memory and returns it.
class DeviceMemorySource {
 public:
  virtual ~DeviceMemorySource() = default;
  virtual absl::StatusOr<void*> Allocate(size_t bytes, int device) = 0;
  virtual void Free(void* ptr, int device) = 0;
};

// cudaMalloc/cudaFree through core/cuda_runtime.h (errors without CUDA).
std::unique_ptr<DeviceMemorySource> CudaDeviceMemory();

// Per device, in bytes of size classes (what the source holds).
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
  // Returns every cached (free) block of `device` (-1: all devices) to the source.
  void EmptyCache(int device = -1);

  DeviceMemoryStats Stats(int device) const;
  // Peaks restart from the current values.
  void ResetPeak(int device);

 private:
  struct Block {
    size_t bytes;
    int device;
  };
  // Called with mu_ held.
  void EmptyCacheLocked(int device);

  std::unique_ptr<DeviceMemorySource> source_;
  mutable std::mutex mu_;  // Guards everything below.
  std::unordered_map<void*, Block> live_;
  std::map<std::pair<int, size_t>, std::vector<void*>> cached_;  // (device, size class) -> blocks
  std::map<int, DeviceMemoryStats> stats_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_CUDA_CACHING_ALLOCATOR_H_
