// Storage: one owned allocation on a device, shared by tensors and their views.
//
//   absl::StatusOr<std::shared_ptr<Storage>> s = Storage::Allocate(1 << 20, Device::Cpu());
//
// Host memory is 64-byte aligned (a cache line; AVX-512 loads). From 2 MiB
// on it is 2 MiB-aligned and advised onto transparent huge pages
// (MADV_HUGEPAGE; the kernel's THP mode decides), because copies through
// large buffers (collectives, process_vm_readv between ranks) ran 15-30 %
// faster on them (docs/PERFORMANCE.md); LOCKSTEP_NO_HUGE_PAGES=1 turns the
// advice off. With
// `pinned = true` and a CUDA device visible, host memory is page-locked
// (cudaHostAlloc) so copies to the GPU run at full speed and asynchronously;
// otherwise it silently falls back to ordinary memory and `pinned()` says so.
//
// Storage::Wrap adopts memory another library owns (a libtorch tensor's, in
// interop/torch) without copying: the Storage holds `keep_alive` and drops
// it when the last tensor viewing the memory goes; it never frees the
// memory itself.
//
// CUDA and pinned memory come from the process's caching allocators
// (core/cuda/cuda_caching_allocator.h): DefaultCudaAllocator() for CUDA devices,
// DefaultPinnedHostAllocator() for pinned host memory, so that the same
// sizes allocated every step (activations, gradients, DDP buckets, pinned
// batches and staging) cost no cudaMalloc/cudaHostAlloc after the first
// step. ~Storage returns the block to its cache; their Stats() give current
// and peak bytes per device. The reuse rules:
//  - A freed CUDA block is handed out again at once, without cudaFree's
//    implicit device synchronization. That is safe for work on the device's
//    legacy default stream, where core's kernels and stream-less copies run
//    (later work there is ordered after earlier). Work queued on a
//    cuda::Stream of one's own (non-blocking) must have finished, or the
//    tensor must be kept alive until it has, before the last reference goes;
//    the collectives keep their tensors alive until an operation has
//    finished on the device.
//  - A freed pinned block is fenced by an event on the legacy default stream
//    of each device the process uses, and reused only once that event has
//    completed, so a pending stream-less asynchronous copy never sees its
//    buffer handed to someone else. Copies on one's own streams follow the
//    rule above.
#ifndef LOCKSTEP_CORE_STORAGE_H_
#define LOCKSTEP_CORE_STORAGE_H_

#include <cstddef>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device.h"

namespace lockstep {

inline constexpr size_t kHostAlignment = 64;

class Storage {
 public:
  static absl::StatusOr<std::shared_ptr<Storage>> Allocate(size_t nbytes, Device device, bool pinned = false);

  // `nbytes` at `data` on `device`, owned by whoever `keep_alive` keeps
  // alive (its deleter releases them). InvalidArgument for a null `data`
  // with nbytes > 0 or a null `keep_alive`.
  static absl::StatusOr<std::shared_ptr<Storage>> Wrap(void* data, size_t nbytes, Device device,
                                                       std::shared_ptr<const void> keep_alive);

  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();

  // nullptr when nbytes() == 0.
  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  // True only for page-locked host memory this Storage allocated.
  bool pinned() const { return pinned_; }
  // Whether the memory belongs to another owner (Wrap).
  bool wrapped() const { return keep_alive_ != nullptr; }

  // Frees the memory but keeps this Storage, its size and every tensor
  // viewing it; Restore allocates `nbytes()` again (uninitialized) behind the
  // same views. PyTorch's storage().resize_(0) and resize_(n), which FSDP
  // uses to drop gathered parameters that a layer's saved forward state
  // still names (fsdp/fully_shard.h). While released, data() is nullptr:
  // only code that restores before reading may hold such views.
  // FailedPrecondition for wrapped memory (another library owns it).
  absl::Status Release();
  absl::Status Restore();
  bool released() const { return released_; }

 private:
  // Returns data_ to its allocator (nothing for wrapped or empty memory).
  void FreeData();
  Storage(void* data, size_t nbytes, Device device, bool pinned)
      : data_(data), nbytes_(nbytes), device_(device), pinned_(pinned) {}

  void* data_;
  size_t nbytes_;
  Device device_;
  bool pinned_;
  bool released_ = false;
  std::shared_ptr<const void> keep_alive_;  // Wrap: the memory's owner.
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_STORAGE_H_
