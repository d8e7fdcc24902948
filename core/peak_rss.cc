#include "core/peak_rss.h"

#include <sys/resource.h>

namespace lockstep {

int64_t PeakRssBytes() {
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB.
}

}  // namespace lockstep
