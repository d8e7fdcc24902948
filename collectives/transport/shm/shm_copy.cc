#include "collectives/transport/shm/shm_copy.h"

#include <sys/uio.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace lockstep {
namespace shm_internal {

// No read-for-ownership, and the lines are not pulled over from the peer's
// cache when the ranks' cores do not share one. Used for large messages only
// (a small one is read by the peer at once, best from a cache).
void CopyStreaming(char* dst, const char* src, size_t n) {
#if defined(__SSE2__)
  // Head: up to the destination's 16-byte alignment.
  const size_t head = std::min(n, (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15);
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  std::memcpy(dst + i, src + i, n - i);
  // Streaming stores are weakly ordered: they must be visible before the
  // index that publishes them (a release store does not order them).
  _mm_sfence();
#else
  std::memcpy(dst, src, n);
#endif
}

int ReadRemote(pid_t pid, uint64_t remote, void* local, size_t n) {
  size_t done = 0;
  while (done < n) {
    iovec l{static_cast<char*>(local) + done, n - done};
    iovec r{reinterpret_cast<void*>(static_cast<uintptr_t>(remote + done)), n - done};
    const ssize_t got = ::process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (got == 0) return EFAULT;
    done += static_cast<size_t>(got);
  }
  return 0;
}

}  // namespace shm_internal
}  // namespace lockstep
