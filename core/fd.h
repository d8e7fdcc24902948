// Fd: an owned file descriptor (a socket, a pipe, a pidfd, a file), closed
// when the Fd goes away.
//
//   Fd fd(::open(path, O_RDONLY | O_CLOEXEC));
//   if (!fd.valid()) return absl::ErrnoToStatus(errno, path);
//   ... read(fd.get(), ...) ...
//   if (fd.Close() != 0) ...   // where the close error matters (after writing)
#ifndef LOCKSTEP_CORE_FD_H_
#define LOCKSTEP_CORE_FD_H_

#include <utility>

#include "absl/strings/string_view.h"

namespace lockstep {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) Reset(std::exchange(other.fd_, -1));
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }  // Errors ignored: use Close() where they matter.

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

  // Closes the descriptor held (if any) and holds `fd`.
  void Reset(int fd = -1);
  // Gives the descriptor up without closing it.
  int Release() { return std::exchange(fd_, -1); }
  // Closes now and returns close()'s result (0, or -1 with errno). Linux
  // releases the descriptor even when close fails, so it is never retried;
  // 0 when nothing is held.
  int Close();

 private:
  int fd_ = -1;
};

// Writes all of `bytes` to `fd`, again after EINTR and short writes: true,
// or false with errno set by the failing write (0 when it wrote nothing).
bool WriteFully(int fd, absl::string_view bytes);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_FD_H_
