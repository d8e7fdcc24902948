// The BLAS kernel choice: a user's OPENBLAS_CORETYPE is never overridden,
// and the core type proposed for a CPU that OpenBLAS did not recognize is
// one that OpenBLAS then really uses (checked in a child process, where the
// variable is read as the library loads).
#include "nn/blas_kernels.h"

#include <cstdlib>
#include <string>

#include "core/subprocess.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(BlasKernelsTest, ReportsTheKernelsInUse) { EXPECT_FALSE(BlasCoreName().empty()); }

TEST(BlasKernelsTest, AUsersChoiceIsKept) {
  const char* before = std::getenv("OPENBLAS_CORETYPE");
  const std::string saved = before == nullptr ? "" : before;
  setenv("OPENBLAS_CORETYPE", "Haswell", 1);
  EXPECT_EQ(BetterBlasCoreType(), "");
  if (before == nullptr) {
    unsetenv("OPENBLAS_CORETYPE");
  } else {
    setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
  }
}

// Run in a child with OPENBLAS_CORETYPE set: the library took it.
TEST(BlasKernelsTest, ChildUsesTheCoreType) {
  const char* want = std::getenv("LOCKSTEP_EXPECT_BLAS_CORE");
  if (want == nullptr) GTEST_SKIP() << "runs as a child of ProposedCoreTypeIsTakenByOpenBlas";
  EXPECT_EQ(BlasCoreName(), want);
}

TEST(BlasKernelsTest, ProposedCoreTypeIsTakenByOpenBlas) {
  const std::string core = BetterBlasCoreType();
  if (core.empty()) GTEST_SKIP() << "OpenBLAS recognized this CPU (" << BlasCoreName() << ")";
  SubprocessOptions options;
  options.argv = {"/proc/self/exe", "--gtest_filter=BlasKernelsTest.ChildUsesTheCoreType"};
  options.env = {{"OPENBLAS_CORETYPE", core}, {"LOCKSTEP_EXPECT_BLAS_CORE", core}};
  options.alarm_seconds = 60;
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
  ASSERT_TRUE(child.ok()) << child.status();
  absl::StatusOr<ExitStatus> status = child->Wait();
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(status->success()) << status->ToString();
}

}  // namespace
}  // namespace lockstep
