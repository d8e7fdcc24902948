#include "nn/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

// An owned file descriptor; closed (errors ignored) on destruction. Use
// Close() where the close error matters (after writing).
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() {
    if (fd_ >= 0) ::close(fd_);
  }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

  // Closes now and reports the result. Linux releases the descriptor even
  // when close fails, so it is never retried.
  int Close() { return ::close(std::exchange(fd_, -1)); }

 private:
  int fd_;
};

// Removes the temporary file unless the write got as far as the rename.
class TempFileRemover {
 public:
  explicit TempFileRemover(std::string path) : path_(std::move(path)) {}
  TempFileRemover(const TempFileRemover&) = delete;
  TempFileRemover& operator=(const TempFileRemover&) = delete;
  ~TempFileRemover() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  void Dismiss() { path_.clear(); }

 private:
  std::string path_;
};

std::string ErrnoText(int err) { return std::strerror(err); }

absl::Status WriteError(const std::string& path, absl::string_view step, int err,
                        absl::string_view advice = "") {
  return absl::InternalError(absl::StrCat("WriteFileAtomically(", path, "): ", step, ": ", ErrnoText(err),
                                          advice.empty() ? "" : "; ", advice,
                                          " (the previous file, if any, is unchanged)"));
}

// The directory holding `path`: what must be fsynced for the rename to last.
std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents,
                                 const AtomicWriteOptions& options) {
  const std::string temp = absl::StrCat(path, ".tmp.", ::getpid());
  ScopedFd fd(::open(temp.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644));
  if (!fd.valid()) {
    const int err = errno;
    return WriteError(path, absl::StrCat("cannot create the temporary file ", temp), err,
                      err == ENOENT ? "create the directory first" : "check that the directory is writable");
  }
  TempFileRemover remover(temp);

  size_t written = 0;
  const bool crash = options.testing_crash_after_bytes >= 0;
  const size_t crash_at = crash ? static_cast<size_t>(options.testing_crash_after_bytes) : 0;
  while (written < contents.size()) {
    size_t chunk = contents.size() - written;
    if (crash) {
      if (written >= crash_at) break;
      chunk = std::min(chunk, crash_at - written);
    }
    const ssize_t n = ::write(fd.get(), contents.data() + written, chunk);
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      return WriteError(
          path, absl::StrCat("writing ", temp, " failed after ", written, " of ", contents.size(), " bytes"),
          err, err == ENOSPC ? "free some disk space" : "");
    }
    written += static_cast<size_t>(n);
  }
  if (crash) std::_Exit(kSimulatedCrashExitCode);

  if (::fsync(fd.get()) != 0) {
    const int err = errno;
    return WriteError(path, absl::StrCat("fsync of ", temp, " failed"), err);
  }
  if (fd.Close() != 0) {
    const int err = errno;
    return WriteError(path, absl::StrCat("closing ", temp, " failed"), err);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    return WriteError(path, absl::StrCat("renaming ", temp, " over it failed"), err,
                      err == EISDIR ? "the path names a directory" : "");
  }
  remover.Dismiss();

  // Without this the rename may be lost on power failure even though the data
  // blocks are on disk.
  const std::string dir = DirectoryOf(path);
  ScopedFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd.valid() || ::fsync(dir_fd.get()) != 0) {
    const int err = errno;
    return absl::InternalError(absl::StrCat(
        "WriteFileAtomically(", path, "): the new contents are in place but fsync of the directory ", dir,
        " failed: ", ErrnoText(err), "; they may not survive a power loss, write again"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path, int64_t max_bytes) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    const int err = errno;
    const std::string message = absl::StrCat("ReadFileToString(", path, "): cannot open: ", ErrnoText(err));
    if (err == ENOENT) return absl::NotFoundError(message + "; check the path");
    return absl::PermissionDeniedError(message);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    const int err = errno;
    return absl::InternalError(absl::StrCat("ReadFileToString(", path, "): fstat failed: ", ErrnoText(err)));
  }
  auto too_large = [&](absl::string_view size) {
    return absl::ResourceExhaustedError(
        absl::StrCat("ReadFileToString(", path, "): the file has ", size, " bytes, more than the limit of ",
                     max_bytes, "; raise max_bytes if the file is expected to be this large"));
  };
  if (S_ISREG(st.st_mode) && st.st_size > max_bytes) return too_large(absl::StrCat(st.st_size));

  std::string out;
  // st_size is only a hint (0 for /proc files, and files may grow), so read
  // until end of file with the limit enforced on what actually arrives.
  if (S_ISREG(st.st_mode)) out.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      return absl::InternalError(absl::StrCat("ReadFileToString(", path, "): read failed after ", out.size(),
                                              " bytes: ", ErrnoText(err)));
    }
    if (n == 0) break;
    if (static_cast<int64_t>(out.size()) + n > max_bytes) {
      return too_large(absl::StrCat("at least ", static_cast<int64_t>(out.size()) + n));
    }
    out.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace lockstep
