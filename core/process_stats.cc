#include "core/process_stats.h"

#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace lockstep {

double ProcessAgeSeconds() {
  FILE* f = std::fopen("/proc/self/stat", "r");
  if (f == nullptr) return -1;
  char buf[4096];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // Field 22 (starttime, clock ticks since boot); field 2, the command, is
  // in parentheses and may hold spaces: count from the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return -1;
  int field = 2;
  unsigned long long start = 0;
  for (const char* q = p + 1; *q != '\0'; ++q) {
    if (*q != ' ') continue;
    if (++field == 22) {
      start = std::strtoull(q + 1, nullptr, 10);
      break;
    }
  }
  if (field != 22) return -1;
  timespec now{};
  if (::clock_gettime(CLOCK_BOOTTIME, &now) != 0) return -1;
  const double started = static_cast<double>(start) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec) - started;
}

int OpenDescriptorCount() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int n = 0;
  while (const dirent* e = ::readdir(dir)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) ++n;
  }
  ::closedir(dir);
  return n - 1;  // The directory's own descriptor.
}

}  // namespace lockstep
