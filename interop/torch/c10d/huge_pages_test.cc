// HugePageAdvisor: a large anonymous buffer on 4 KiB pages keeps its contents
// and, where the kernel offers transparent huge pages (madvise or always),
// ends up on 2 MiB pages (AnonHugePages in /proc/self/smaps); small buffers
// and a repeated range are left alone.
#include "interop/torch/c10d/huge_pages.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

// The kernel's THP mode: "always", "madvise" or "never".
std::string ThpMode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  const size_t open = line.find('['), close = line.find(']');
  return open == std::string::npos ? "" : line.substr(open + 1, close - open - 1);
}

// AnonHugePages (kB) of the mapping that contains `p`.
int64_t HugeKbAt(const void* p) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  while (std::getline(in, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= at && at < hi;
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0) return std::stoll(line.substr(14));
  }
  return -1;
}

TEST(HugePageAdvisorTest, ALargeBufferMovesToHugePagesAndKeepsItsContents) {
  constexpr size_t kBytes = size_t{16} << 20;
  void* raw = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(raw, MAP_FAILED);
  ASSERT_EQ(::madvise(raw, kBytes, MADV_NOHUGEPAGE), 0);  // As a 4 KiB-page allocator leaves it.
  auto* bytes = static_cast<unsigned char*>(raw);
  for (size_t i = 0; i < kBytes; ++i) bytes[i] = static_cast<unsigned char>(i * 131 + 7);
  HugePageAdvisor advisor;
  advisor.Advise(raw, kBytes);
  advisor.Advise(raw, kBytes);                          // Remembered: not advised twice.
  advisor.Advise(raw, HugePageAdvisor::kMinBytes - 1);  // Too small.
  EXPECT_EQ(advisor.advised(), 1);
  for (size_t i = 0; i < kBytes; ++i) ASSERT_EQ(bytes[i], static_cast<unsigned char>(i * 131 + 7)) << i;
  const std::string mode = ThpMode();
  if (mode == "always" || mode == "madvise") {
    // At least the aligned interior (16 MiB minus up to one 2 MiB page at
    // each end), unless the kernel had no huge pages to give, which it then
    // says when asked again (EAGAIN or ENOMEM).
    const int64_t huge = HugeKbAt(bytes + (8 << 20));
    if (huge < 12 * 1024) {
      const uintptr_t begin = (reinterpret_cast<uintptr_t>(raw) + (2 << 20) - 1) & ~uintptr_t{(2 << 20) - 1};
      errno = 0;
      const int again = ::madvise(reinterpret_cast<void*>(begin), 12 << 20, 25 /* MADV_COLLAPSE */);
      if (again != 0 && (errno == EAGAIN || errno == ENOMEM)) {
        std::fprintf(stderr, "no huge pages free (%s): the advice could not take effect\n", std::strerror(errno));
      } else {
        ADD_FAILURE() << "THP mode " << mode << ": AnonHugePages " << huge << " kB after MADV_COLLAPSE";
      }
    }
  }
  ::munmap(raw, kBytes);
}

}  // namespace
}  // namespace lockstep
