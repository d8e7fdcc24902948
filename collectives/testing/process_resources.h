// What this process holds, for leak tests: the entries of a /proc or /dev
// folder (descriptors, threads, shared-memory files) and the mappings of a
// named file. For tests only.
#ifndef LOCKSTEP_COLLECTIVES_TESTING_PROCESS_RESOURCES_H_
#define LOCKSTEP_COLLECTIVES_TESTING_PROCESS_RESOURCES_H_

#include <set>
#include <string>

#include "absl/strings/string_view.h"

namespace lockstep {
namespace testing {

// The names in `dir` ("/proc/self/fd", "/proc/self/task", "/dev/shm");
// empty when it cannot be read.
std::multiset<std::string> Entries(const char* dir);

// How many of this process's mappings (/proc/self/maps) name `name`.
int CountMappingsOf(absl::string_view name);

}  // namespace testing
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_TESTING_PROCESS_RESOURCES_H_
