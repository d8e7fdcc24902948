// LOCKSTEP_REQUIRE_ROOT: a root-only test case fails when not run as root,
// rather than pass without having run. CI runs as root; a developer without
// root who wants the rest of the suite sets LOCKSTEP_SKIP_ROOT_TESTS=1
// (`bazel test --test_env=LOCKSTEP_SKIP_ROOT_TESTS=1 ...`), and the case is
// then reported as skipped, never as passed silently.
//
//   TEST(HostIdentityTest, AnotherNetworkNamespaceIsAnotherHost) {
//     LOCKSTEP_REQUIRE_ROOT("unsharing a network namespace");
//     ...
//   }
#ifndef LOCKSTEP_CORE_TESTING_REQUIRE_ROOT_H_
#define LOCKSTEP_CORE_TESTING_REQUIRE_ROOT_H_

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "gtest/gtest.h"

namespace lockstep {
namespace testing {

// LOCKSTEP_SKIP_ROOT_TESTS=1 is set.
inline bool RootTestsMaySkip() {
  const char* skip = std::getenv("LOCKSTEP_SKIP_ROOT_TESTS");
  return skip != nullptr && std::strcmp(skip, "1") == 0;
}

}  // namespace testing
}  // namespace lockstep

// In a TEST body (it returns from it, as GTEST_SKIP and FAIL do).
#define LOCKSTEP_REQUIRE_ROOT(what)                                                            \
  if (::geteuid() == 0) {                                                                      \
  } else if (::lockstep::testing::RootTestsMaySkip())                                          \
    GTEST_SKIP() << what << " needs root; skipped because LOCKSTEP_SKIP_ROOT_TESTS=1";         \
  else                                                                                         \
    FAIL() << what                                                                             \
           << " needs root (CI runs as root): run as root, or set LOCKSTEP_SKIP_ROOT_TESTS=1 " \
              "(bazel test --test_env=LOCKSTEP_SKIP_ROOT_TESTS=1) to skip the root-only cases"

#endif  // LOCKSTEP_CORE_TESTING_REQUIRE_ROOT_H_
