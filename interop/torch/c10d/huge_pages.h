// HugePageAdvisor: asks the kernel to back large tensors that collectives
// read and write with 2 MiB pages, once per tensor.
//
//   HugePageAdvisor advisor;
//   advisor.Advise(t.data_ptr(), t.nbytes());   // before the collective
//
// lockstep's own tensors are allocated on 2 MiB pages (core/storage.h);
// PyTorch's CPU allocator hands out 4 KiB pages, with which a 16-64 MiB
// all-reduce over shared memory took 1.4-1.9x as long as on lockstep's own
// buffers (docs/PERFORMANCE.md). For a tensor of at least kMinBytes, Advise
// marks the 2 MiB-aligned part of its memory MADV_HUGEPAGE and collapses it
// at once (MADV_COLLAPSE, Linux 6.1; the contents stay, copied once by the
// kernel into huge pages), then remembers the range, so a tensor used again
// (DDP's buckets, a training loop's gradients) pays once. Failures (an older
// kernel, no huge pages free, memory that is not anonymous) are ignored: the
// advice is only a hint. LOCKSTEP_TORCH_HUGE_PAGES=0 turns it off.
// Thread-safe.
#ifndef LOCKSTEP_INTEROP_TORCH_C10D_HUGE_PAGES_H_
#define LOCKSTEP_INTEROP_TORCH_C10D_HUGE_PAGES_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <utility>

namespace lockstep {

class HugePageAdvisor {
 public:
  static constexpr size_t kMinBytes = size_t{4} << 20;
  // Ranges remembered (the oldest forgotten first).
  static constexpr size_t kRemembered = 256;

  HugePageAdvisor();
  void Advise(const void* data, size_t bytes);
  // Ranges advised so far (for tests).
  int64_t advised() const;

 private:
  const bool enabled_;
  mutable std::mutex mu_;
  std::deque<std::pair<uintptr_t, uintptr_t>> done_;
  int64_t advised_ = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_INTEROP_TORCH_C10D_HUGE_PAGES_H_
