#include "core/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/fd.h"

namespace lockstep {
namespace {

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

absl::Status WriteError(const std::string& path, absl::string_view step, int err, absl::string_view advice = "") {
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

std::string BaseNameOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

constexpr absl::string_view kTempInfix = ".tmp.";
constexpr size_t kTempSuffixDigits = 16;
constexpr int kTempNameTries = 16;

// 64 unpredictable bits as 16 lowercase hex digits.
absl::StatusOr<std::string> RandomSuffix() {
  uint64_t bits = 0;
  size_t got = 0;
  while (got < sizeof(bits)) {
    const ssize_t n = ::getrandom(reinterpret_cast<char*>(&bits) + got, sizeof(bits) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("getrandom failed: ", ErrnoText(errno)));
    }
    got += static_cast<size_t>(n);
  }
  return absl::StrCat(absl::Hex(bits, absl::kZeroPad16));
}

// `name` is `<base>.tmp.` + 16 lowercase hex digits: one of our temporary files.
bool IsOurTempName(absl::string_view name, absl::string_view base) {
  if (name.size() != base.size() + kTempInfix.size() + kTempSuffixDigits) return false;
  if (name.substr(0, base.size()) != base || name.substr(base.size(), kTempInfix.size()) != kTempInfix) {
    return false;
  }
  for (char c : name.substr(base.size() + kTempInfix.size())) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};

// Best effort: a leftover we cannot stat or remove is left for the next write.
void RemoveStaleTempFiles(const std::string& path, std::chrono::seconds age, time_t write_start) {
  if (age.count() < 0) return;
  std::unique_ptr<DIR, DirCloser> dir(::opendir(DirectoryOf(path).c_str()));
  if (dir == nullptr) return;
  const std::string base = BaseNameOf(path);
  const time_t cutoff = write_start - static_cast<time_t>(age.count());
  while (const dirent* entry = ::readdir(dir.get())) {
    if (!IsOurTempName(entry->d_name, base)) continue;
    struct stat st;
    // AT_SYMLINK_NOFOLLOW: a symlink with our name is not ours; leave it.
    if (::fstatat(::dirfd(dir.get()), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(st.st_mode) || st.st_mtime >= cutoff) continue;
    ::unlinkat(::dirfd(dir.get()), entry->d_name, 0);
  }
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents,
                                 const AtomicWriteOptions& options) {
  RemoveStaleTempFiles(path, options.stale_temp_age, ::time(nullptr));
  // O_EXCL|O_NOFOLLOW: whatever sits at the name (a planted symlink
  // included) is never opened; EEXIST draws another name.
  std::string temp;
  Fd fd;
  for (int attempt = 0; attempt < kTempNameTries && !fd.valid(); ++attempt) {
    std::string suffix = options.testing_first_temp_suffix;
    if (attempt > 0 || suffix.empty()) {
      absl::StatusOr<std::string> random = RandomSuffix();
      if (!random.ok()) {
        return absl::InternalError(absl::StrCat("WriteFileAtomically(", path,
                                                "): naming the temporary file: ", random.status().message(),
                                                " (the previous file, if any, is unchanged)"));
      }
      suffix = *std::move(random);
    }
    temp = absl::StrCat(path, kTempInfix, suffix);
    fd = Fd(::open(temp.c_str(), O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY | O_CLOEXEC, 0644));
    if (!fd.valid() && errno != EEXIST) break;
  }
  if (!fd.valid()) {
    const int err = errno;
    return WriteError(path, absl::StrCat("cannot create the temporary file ", temp), err,
                      err == ENOENT   ? "create the directory first"
                      : err == EEXIST ? "every temporary name tried exists; remove stray files next to it"
                                      : "check that the directory is writable");
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
      return WriteError(path,
                        absl::StrCat("writing ", temp, " failed after ", written, " of ", contents.size(), " bytes"),
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
  Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd.valid() || ::fsync(dir_fd.get()) != 0) {
    const int err = errno;
    return absl::InternalError(
        absl::StrCat("WriteFileAtomically(", path, "): the new contents are in place but fsync of the directory ", dir,
                     " failed: ", ErrnoText(err), "; they may not survive a power loss, write again"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path, int64_t max_bytes) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
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
    return absl::ResourceExhaustedError(absl::StrCat("ReadFileToString(", path, "): the file has ", size,
                                                     " bytes, more than the limit of ", max_bytes,
                                                     "; raise max_bytes if the file is expected to be this large"));
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
      return absl::InternalError(
          absl::StrCat("ReadFileToString(", path, "): read failed after ", out.size(), " bytes: ", ErrnoText(err)));
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
