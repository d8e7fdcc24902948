#include "core/fd.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>
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

TEST(FdTest, WriteFullyWritesEverythingOrSaysWhy) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  Fd r(p[0]), w(p[1]);
  const std::string text(1000, 'x');
  ASSERT_TRUE(WriteFully(w.get(), text));
  std::string got(1000, '\0');
  size_t done = 0;
  while (done < got.size()) {
    const ssize_t n = ::read(r.get(), got.data() + done, got.size() - done);
    ASSERT_GT(n, 0);
    done += static_cast<size_t>(n);
  }
  EXPECT_EQ(got, text);
  EXPECT_FALSE(WriteFully(r.get(), "y"));  // the read end
  EXPECT_EQ(errno, EBADF);
}

}  // namespace
}  // namespace lockstep
