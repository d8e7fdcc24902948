#include "core/fd.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

TEST(FdTest, ClosesOnDestructionAndResetAndFollowsMoves) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  {
    Fd read_end(p[0]);
    Fd write_end(p[1]);
    EXPECT_TRUE(read_end.valid());
    Fd moved = std::move(read_end);
    EXPECT_FALSE(read_end.valid());
    EXPECT_EQ(moved.get(), p[0]);
    write_end.Reset();
    EXPECT_FALSE(IsOpen(p[1]));
    EXPECT_TRUE(IsOpen(p[0]));
  }
  EXPECT_FALSE(IsOpen(p[0]));
}

TEST(FdTest, ReleaseKeepsTheDescriptorOpenAndCloseReportsErrors) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  int raw = -1;
  {
    Fd fd(p[0]);
    raw = fd.Release();
    EXPECT_FALSE(fd.valid());
  }
  EXPECT_TRUE(IsOpen(raw));
  ::close(raw);
  Fd w(p[1]);
  EXPECT_EQ(w.Close(), 0);
  EXPECT_FALSE(w.valid());
  EXPECT_EQ(w.Close(), 0);  // nothing held
  Fd bogus(p[1]);           // already closed above
  EXPECT_EQ(bogus.Close(), -1);
  EXPECT_EQ(errno, EBADF);
}

}  // namespace
}  // namespace lockstep
