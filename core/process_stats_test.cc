#include "core/process_stats.h"

#include <fcntl.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(ProcessStatsTest, AgeIsSinceThisProcessStartedNotSinceBoot) {
  const double age = ProcessAgeSeconds();
  ASSERT_GE(age, 0);
  // The test binary started just now; the machine booted long before: an
  // age measured from boot would be the machine's uptime.
  double uptime = 0;
  FILE* f = std::fopen("/proc/uptime", "r");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fscanf(f, "%lf", &uptime), 1);
  std::fclose(f);
  EXPECT_LE(age, uptime + 0.02);  // One clock tick of slack either way.
  const double later = ProcessAgeSeconds();
  EXPECT_GE(later + 0.02, age);
}

TEST(ProcessStatsTest, CountsEveryDescriptorItOpens) {
  const int before = OpenDescriptorCount();
  ASSERT_GE(before, 3);  // stdin, stdout, stderr at least.
  int fds[5];
  for (int& fd : fds) fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  EXPECT_EQ(OpenDescriptorCount(), before + 5);
  for (int fd : fds) ::close(fd);
  EXPECT_EQ(OpenDescriptorCount(), before);
}

}  // namespace
}  // namespace lockstep
