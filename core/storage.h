// Storage: one owned allocation on a device, shared by tensors and their views.
//
//   absl::StatusOr<std::shared_ptr<Storage>> s = Storage::Allocate(1 << 20, Device::Cpu());
//
// Host memory is 64-byte aligned (a cache line; AVX-512 loads). With
// `pinned = true` and a CUDA device visible, host memory is page-locked
// (cudaHostAlloc) so copies to the GPU run at full speed and asynchronously;
// otherwise it silently falls back to ordinary memory and `pinned()` says so.
// CUDA memory comes from cudaMalloc on the tensor's device.
#ifndef LOCKSTEP_CORE_STORAGE_H_
#define LOCKSTEP_CORE_STORAGE_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "core/device.h"

namespace lockstep {

inline constexpr size_t kHostAlignment = 64;

class Storage {
 public:
  static absl::StatusOr<std::shared_ptr<Storage>> Allocate(size_t nbytes, Device device,
                                                           bool pinned = false);

  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();

  // nullptr when nbytes() == 0.
  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  // True only for page-locked host memory.
  bool pinned() const { return pinned_; }

 private:
  Storage(void* data, size_t nbytes, Device device, bool pinned)
      : data_(data), nbytes_(nbytes), device_(device), pinned_(pinned) {}

  void* data_;
  size_t nbytes_;
  Device device_;
  bool pinned_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_STORAGE_H_
