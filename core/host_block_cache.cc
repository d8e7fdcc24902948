#include "core/internal/host_block_cache.h"

#include <cstdlib>
#include <string>

namespace lockstep {
namespace core_internal {

HostBlockCache::~HostBlockCache() {
  for (const Block& b : blocks_) std::free(b.data);
}

HostBlockCache& HostBlockCache::Default() {
  static HostBlockCache* cache = [] {
    size_t cap = size_t{512} << 20;
    if (const char* v = std::getenv("LOCKSTEP_HOST_CACHE_BYTES"); v != nullptr && *v != '\0') {
      char* end = nullptr;
      const unsigned long long parsed = std::strtoull(v, &end, 10);
      if (end != nullptr && *end == '\0') cap = static_cast<size_t>(parsed);
    }
    return new HostBlockCache(cap);
  }();
  return *cache;
}

void* HostBlockCache::Take(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = blocks_.size(); i-- > 0;) {
    if (blocks_[i].bytes != bytes) continue;
    void* data = blocks_[i].data;
    blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(i));
    cached_ -= bytes;
    return data;
  }
  return nullptr;
}

void HostBlockCache::Give(void* data, size_t bytes) {
  if (data == nullptr) return;
  std::vector<void*> evicted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (bytes > cap_) {
      evicted.push_back(data);
    } else {
      size_t drop = 0;
      while (cached_ + bytes > cap_) {
        cached_ -= blocks_[drop].bytes;
        evicted.push_back(blocks_[drop].data);
        ++drop;
      }
      blocks_.erase(blocks_.begin(), blocks_.begin() + static_cast<std::ptrdiff_t>(drop));
      blocks_.push_back({data, bytes});
      cached_ += bytes;
    }
  }
  for (void* p : evicted) std::free(p);  // outside the lock
}

size_t HostBlockCache::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

}  // namespace core_internal
}  // namespace lockstep
