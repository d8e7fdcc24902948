#include "collectives/testing/process_resources.h"

#include <dirent.h>

#include <fstream>

#include "absl/strings/match.h"

namespace lockstep {
namespace testing {

std::multiset<std::string> Entries(const char* dir) {
  std::multiset<std::string> names;
  if (DIR* d = ::opendir(dir)) {
    while (dirent* e = ::readdir(d)) names.insert(e->d_name);
    ::closedir(d);
  }
  return names;
}

int CountMappingsOf(absl::string_view name) {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);) count += absl::StrContains(line, name) ? 1 : 0;
  return count;
}

}  // namespace testing
}  // namespace lockstep
