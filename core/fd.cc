#include "core/fd.h"

#include <unistd.h>

namespace lockstep {

void Fd::Reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

int Fd::Close() {
  if (fd_ < 0) return 0;
  return ::close(std::exchange(fd_, -1));
}

}  // namespace lockstep
