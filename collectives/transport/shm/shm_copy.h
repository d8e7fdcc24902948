// The byte movers under ShmTransport's copy paths: memcpy with or without
// non-temporal stores, and reads from a peer's memory (process_vm_readv).
// Internal to collectives/transport/shm.
#ifndef LOCKSTEP_COLLECTIVES_TRANSPORT_SHM_SHM_COPY_H_
#define LOCKSTEP_COLLECTIVES_TRANSPORT_SHM_SHM_COPY_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace lockstep {
namespace shm_internal {

// memcpy with non-temporal stores: the destination's lines go to memory
// without being read first and without evicting the caches' useful lines.
void CopyStreaming(char* dst, const char* src, size_t n);

// CopyStreaming where `streaming`, else memcpy.
inline void Copy(char* dst, const char* src, size_t n, bool streaming) {
  if (streaming) {
    CopyStreaming(dst, src, n);
  } else {
    std::memcpy(dst, src, n);
  }
}

// Asks for the cache lines of `n` bytes at `offset` of a ring of `capacity`
// bytes at `ring` (wrapping) to be loaded, all at once: a receiver that has
// just seen the sender's head move so waits for one line transfer, not for
// the header's and then, one after another as the reduction reaches them,
// the payload's.
inline void PrefetchRing(const char* ring, uint64_t capacity, uint64_t offset, size_t n) {
  constexpr size_t kLineBytes = 64;
  // One division, then wrap by hand: a division per line (the ring's size
  // is not a power of two) kept the prefetches ~10 cycles apart each.
  uint64_t pos = offset % capacity;
  for (size_t i = 0; i < n; i += kLineBytes) {
    __builtin_prefetch(ring + pos, 0, 3);
    pos += kLineBytes;
    if (pos >= capacity) pos -= capacity;
  }
}

// Reads `n` bytes at `remote` in process `pid` into `local`. Returns errno
// (0: done; EFAULT for a read that returned nothing).
int ReadRemote(pid_t pid, uint64_t remote, void* local, size_t n);

// A spinning core's pause.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace shm_internal
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_TRANSPORT_SHM_SHM_COPY_H_
