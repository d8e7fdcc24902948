#include "collectives/transport/host_identity.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

// The first line of a small /proc file, trimmed; "" when unreadable (a
// container without /proc/sys still has a hostname and a namespace).
std::string FirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  return std::string(absl::StripAsciiWhitespace(line));
}

}  // namespace

absl::StatusOr<std::string> LocalHostIdentity(const EnvLookup& env) {
  if (const char* id = env(kHostIdEnv); id != nullptr && *id != '\0') return std::string(id);
  char hostname[256] = {};
  if (gethostname(hostname, sizeof(hostname) - 1) != 0) hostname[0] = '\0';
  struct stat net;
  if (stat("/proc/self/ns/net", &net) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("LocalHostIdentity: cannot stat /proc/self/ns/net (", std::strerror(errno),
                     "), so ranks in different network namespaces cannot be told apart; mount /proc or set ",
                     kHostIdEnv, " to a name shared by exactly the ranks that share memory"));
  }
  return absl::StrCat(hostname, "/", FirstLine("/proc/sys/kernel/random/boot_id"), "/net:", net.st_dev, ":",
                      net.st_ino);
}

absl::StatusOr<std::string> LocalHostIdentity() {
  return LocalHostIdentity([](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace lockstep
