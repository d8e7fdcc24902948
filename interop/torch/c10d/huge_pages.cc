#include "interop/torch/c10d/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace lockstep {
namespace {

constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
#ifndef MADV_COLLAPSE
constexpr int MADV_COLLAPSE = 25;  // Linux 6.1's value; older headers lack it.
#endif

bool EnabledByEnvironment() {
  const char* v = std::getenv("LOCKSTEP_TORCH_HUGE_PAGES");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

}  // namespace

HugePageAdvisor::HugePageAdvisor() : enabled_(EnabledByEnvironment()) {}

void HugePageAdvisor::Advise(const void* data, size_t bytes) {
  if (!enabled_ || data == nullptr || bytes < kMinBytes) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHugePage - 1);
  if (end <= begin) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto same = std::find(done_.begin(), done_.end(), std::make_pair(begin, end));
    if (same != done_.end()) return;
    done_.emplace_back(begin, end);
    if (done_.size() > kRemembered) done_.pop_front();
    ++advised_;
  }
  void* start = reinterpret_cast<void*>(begin);
  // Hints only: their failures change nothing but the speed.
  (void)::madvise(start, end - begin, MADV_HUGEPAGE);
  (void)::madvise(start, end - begin, MADV_COLLAPSE);
}

int64_t HugePageAdvisor::advised() const {
  std::lock_guard<std::mutex> lock(mu_);
  return advised_;
}

}  // namespace lockstep
