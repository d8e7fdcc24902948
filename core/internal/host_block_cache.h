// HostBlockCache: freed large host blocks (the 2 MiB-aligned, huge-page
// advised ones of core/storage.cc), kept for the next allocation of the
// same size. Training allocates the same activation and gradient sizes every
// step; without the cache each one is fresh memory from the kernel, which
// zeroes every page on first touch (~10 % of a CNN step here,
// docs/PERFORMANCE.md). Bounded: at most `cap_bytes` are kept, the oldest
// freed first beyond that; a block larger than the cap is freed at once.
// Thread-safe.
//
//   HostBlockCache cache(512 << 20);
//   void* p = cache.Take(bytes);            // null: allocate it yourself
//   cache.Give(p, bytes);                   // kept, or std::free'd
#ifndef LOCKSTEP_CORE_INTERNAL_HOST_BLOCK_CACHE_H_
#define LOCKSTEP_CORE_INTERNAL_HOST_BLOCK_CACHE_H_

#include <cstddef>
#include <mutex>
#include <vector>

namespace lockstep {
namespace core_internal {

class HostBlockCache {
 public:
  explicit HostBlockCache(size_t cap_bytes) : cap_(cap_bytes) {}
  ~HostBlockCache();  // frees what it holds
  HostBlockCache(const HostBlockCache&) = delete;
  HostBlockCache& operator=(const HostBlockCache&) = delete;

  // The process's cache: cap LOCKSTEP_HOST_CACHE_BYTES (default 512 MiB; 0
  // turns it off), read once. Never destroyed (Storages may outlive any
  // static), so what it holds at exit goes back with the process.
  static HostBlockCache& Default();

  // A kept block of exactly `bytes` (the most recently freed), or null.
  void* Take(size_t bytes);
  // Keeps `data` (a std::aligned_alloc'ed block of `bytes`) or frees it.
  void Give(void* data, size_t bytes);
  size_t cached_bytes() const;

 private:
  struct Block {
    void* data;
    size_t bytes;
  };
  const size_t cap_;
  mutable std::mutex mu_;
  std::vector<Block> blocks_;  // oldest first
  size_t cached_ = 0;
};

}  // namespace core_internal
}  // namespace lockstep

#endif  // LOCKSTEP_CORE_INTERNAL_HOST_BLOCK_CACHE_H_
