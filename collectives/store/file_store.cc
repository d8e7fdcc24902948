#include "collectives/store/file_store.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "collectives/store/file_store_format.h"
#include "collectives/store/store_ops.h"
#include "core/deadline.h"
#include "core/fd.h"
#include "core/status.h"

namespace lockstep {
namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::UnavailableError(absl::StrCat("FileStore ", path, ": ", what, ": ", std::strerror(errno)));
}

// flock() for the scope; EINTR retried.
class FileLock {
 public:
  FileLock(int fd, bool exclusive) : fd_(fd) {
    int rc;
    do {
      rc = ::flock(fd_, exclusive ? LOCK_EX : LOCK_SH);
    } while (rc != 0 && errno == EINTR);
    ok_ = rc == 0;
  }
  ~FileLock() {
    if (ok_) ::flock(fd_, LOCK_UN);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool ok() const { return ok_; }

 private:
  const int fd_;
  bool ok_ = false;
};

absl::Status WriteAll(int fd, absl::string_view bytes, const std::string& path) {
  return WriteFully(fd, bytes) ? absl::OkStatus() : Errno("write", path);
}

constexpr const char* kUsersKey = "__file_store_closed_users";

// "uid 65534 (nobody)".
std::string UserName(uid_t uid) {
  struct passwd pw {};
  struct passwd* found = nullptr;
  char buffer[1024];
  if (::getpwuid_r(uid, &pw, buffer, sizeof(buffer), &found) == 0 && found != nullptr) {
    return absl::StrCat("uid ", uid, " (", found->pw_name, ")");
  }
  return absl::StrCat("uid ", uid);
}

// Whoever can write the file can set every key (an address, a secret): the
// file must be this user's own and nobody else's to write. A file another
// user created first (in /tmp, say: this kernel leaves fs.protected_regular
// off) is refused rather than adopted.
absl::Status CheckTrusted(const struct stat& st, const std::string& path) {
  if (st.st_uid != ::geteuid()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "FileStore ", path, " is owned by ", UserName(st.st_uid), ", not by this process's ", UserName(::geteuid()),
        ": another user could have written its keys. Remove it if it is yours to remove, "
        "or use a path in a directory only the job's user can write (not /tmp)"));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("FileStore ", path, " is writable by ",
                                                    (st.st_mode & S_IWOTH) != 0 ? "every user" : "its group", " (mode ",
                                                    absl::StrFormat("%04o", st.st_mode & 07777),
                                                    "): another user could have written its keys. "
                                                    "chmod 600 it if nobody else did, or use a new path"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<FileStore>> FileStore::Open(std::string path, FileStoreOptions options) {
  if (path.empty()) return absl::InvalidArgumentError("FileStore::Open: empty path");
  if (options.timeout <= Milliseconds(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("FileStoreOptions.timeout is ", options.timeout.count(), " ms; it must be positive"));
  }
  if (options.num_users < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("FileStoreOptions.num_users is ", options.num_users, "; it must be >= 0 (0: keep the file)"));
  }
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Errno("open", path);
  Fd owned(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Errno("fstat", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("FileStore ", path, " is not a regular file"));
  }
  LOCKSTEP_RETURN_IF_ERROR(CheckTrusted(st, path));
  {
    FileLock lock(fd, /*exclusive=*/true);
    if (!lock.ok()) return Errno("flock", path);
    if (::fstat(fd, &st) != 0) return Errno("fstat", path);
    if (st.st_size == 0) {
      // The first to come writes the magic.
      if (::lseek(fd, 0, SEEK_END) < 0) return Errno("lseek", path);
      LOCKSTEP_RETURN_IF_ERROR(WriteAll(fd, file_store::kMagic, path));
    } else {
      char magic[8] = {};
      const ssize_t n = ::pread(fd, magic, sizeof(magic), 0);
      if (n != static_cast<ssize_t>(sizeof(magic)) || absl::string_view(magic, sizeof(magic)) != file_store::kMagic) {
        return absl::FailedPreconditionError(
            absl::StrCat("FileStore ", path, " exists but is not a FileStore's file (it does not start with \"",
                         file_store::kMagic, "\"); choose a new path, or remove the file if it is a stale one"));
      }
    }
  }
  return std::unique_ptr<FileStore>(new FileStore(std::move(path), std::move(owned), options));
}

FileStore::FileStore(std::string path, Fd fd, FileStoreOptions options)
    : path_(std::move(path)), fd_(std::move(fd)), options_(options), offset_(file_store::kMagic.size()) {
  set_timeout(options_.timeout);
}

FileStore::~FileStore() {
  if (options_.num_users == 0) return;
  // c10d's cleanup: every user counts its close; the last removes the file.
  absl::StatusOr<int64_t> closed = Add(kUsersKey, 1);
  if (closed.ok() && *closed >= options_.num_users) ::unlink(path_.c_str());
}

absl::Status FileStore::CatchUp(bool writer) {
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0) return Errno("fstat", path_);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < offset_) {
    return absl::DataLossError(absl::StrCat("FileStore ", path_, " shrank from ", offset_, " to ", size,
                                            " bytes: another program truncated it"));
  }
  if (size == offset_) return absl::OkStatus();
  std::string bytes(static_cast<size_t>(size - offset_), '\0');
  size_t have = 0;
  while (have < bytes.size()) {
    const ssize_t n = ::pread(fd_.get(), bytes.data() + have, bytes.size() - have, static_cast<off_t>(offset_ + have));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errno("read", path_);
    have += static_cast<size_t>(n);
  }
  std::vector<file_store::Record> records;
  LOCKSTEP_ASSIGN_OR_RETURN(size_t used, file_store::ParseRecords(bytes, offset_, &records));
  for (file_store::Record& r : records) {
    if (r.kind == file_store::Record::Kind::kSet) {
      data_[std::move(r.key)] = std::move(r.value);
    } else {
      data_.erase(r.key);
    }
  }
  offset_ += used;
  if (writer && offset_ < size) {
    // A record cut short by a writer that died mid-append: drop it, or
    // every later record would be misread.
    if (::ftruncate(fd_.get(), static_cast<off_t>(offset_)) != 0) return Errno("ftruncate", path_);
  }
  return absl::OkStatus();
}

absl::Status FileStore::Append(bool set, absl::string_view key, absl::string_view value) {
  if (key.size() > file_store::kMaxKeyBytes || value.size() > file_store::kMaxValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("FileStore ", path_, ": a key of ", key.size(),
                                                   " bytes or a value of ", value.size(), " bytes is over the limits (",
                                                   file_store::kMaxKeyBytes, ", ", file_store::kMaxValueBytes, ")"));
  }
  file_store::Record record;
  record.kind = set ? file_store::Record::Kind::kSet : file_store::Record::Kind::kDelete;
  record.key = std::string(key);
  record.value = std::string(value);
  const std::string bytes = file_store::Encode(record);
  if (::lseek(fd_.get(), static_cast<off_t>(offset_), SEEK_SET) < 0) return Errno("lseek", path_);
  LOCKSTEP_RETURN_IF_ERROR(WriteAll(fd_.get(), bytes, path_));
  offset_ += bytes.size();
  if (set) {
    data_[std::move(record.key)] = std::move(record.value);
  } else {
    data_.erase(record.key);
  }
  return absl::OkStatus();
}

template <typename Fn>
auto FileStore::Locked(bool exclusive, Fn&& fn) -> decltype(fn()) {
  std::lock_guard<std::mutex> guard(mu_);
  FileLock lock(fd_.get(), exclusive);
  if (!lock.ok()) return Errno("flock", path_);
  LOCKSTEP_RETURN_IF_ERROR(CatchUp(exclusive));
  return fn();
}

absl::Status FileStore::Set(absl::string_view key, absl::string_view value) {
  return Locked(true, [&]() -> absl::Status { return Append(true, key, value); });
}

absl::StatusOr<int64_t> FileStore::Add(absl::string_view key, int64_t delta) {
  return Locked(true, [&]() -> absl::StatusOr<int64_t> {
    store_ops::Map scratch;
    auto it = data_.find(key);
    if (it != data_.end()) scratch.emplace(std::string(key), it->second);
    LOCKSTEP_ASSIGN_OR_RETURN(int64_t value, store_ops::Add(scratch, key, delta));
    LOCKSTEP_RETURN_IF_ERROR(Append(true, key, absl::StrCat(value)));
    return value;
  });
}

absl::StatusOr<std::string> FileStore::CompareSet(absl::string_view key, absl::string_view expected,
                                                  absl::string_view desired) {
  return Locked(true, [&]() -> absl::StatusOr<std::string> {
    store_ops::Map scratch;
    auto it = data_.find(key);
    if (it != data_.end()) scratch.emplace(std::string(key), it->second);
    const std::string result = store_ops::CompareSet(scratch, key, expected, desired);
    auto now = scratch.find(key);
    if (now != scratch.end() && (it == data_.end() || it->second != now->second)) {
      LOCKSTEP_RETURN_IF_ERROR(Append(true, key, now->second));
    }
    return result;
  });
}

absl::StatusOr<bool> FileStore::Check(const std::vector<std::string>& keys) {
  return Locked(false, [&]() -> absl::StatusOr<bool> { return store_ops::AllPresent(data_, keys); });
}

absl::StatusOr<bool> FileStore::DeleteKey(absl::string_view key) {
  return Locked(true, [&]() -> absl::StatusOr<bool> {
    if (data_.find(key) == data_.end()) return false;
    LOCKSTEP_RETURN_IF_ERROR(Append(false, key, {}));
    return true;
  });
}

absl::StatusOr<int64_t> FileStore::NumKeys() {
  return Locked(false, [&]() -> absl::StatusOr<int64_t> {
    // The cleanup counter is the store's own, not a user's key.
    return static_cast<int64_t>(data_.size() - data_.count(kUsersKey));
  });
}

absl::Status FileStore::WaitFor(const std::vector<std::string>& keys, Milliseconds timeout) {
  const Deadline deadline = DeadlineIn(timeout);
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    LOCKSTEP_ASSIGN_OR_RETURN(bool present, Check(keys));
    if (present) return absl::OkStatus();
    const Deadline now = SteadyClock::now();
    if (now >= deadline) {
      std::lock_guard<std::mutex> guard(mu_);
      return store_ops::WaitTimeout(data_, keys, timeout);
    }
    std::this_thread::sleep_for(std::min<SteadyClock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(16));
  }
}

absl::StatusOr<std::string> FileStore::Get(absl::string_view key, Milliseconds timeout) {
  const std::vector<std::string> keys = {std::string(key)};
  LOCKSTEP_RETURN_IF_ERROR(WaitFor(keys, timeout));
  return Locked(false, [&]() -> absl::StatusOr<std::string> {
    auto it = data_.find(key);
    if (it == data_.end()) {
      // Deleted between the wait and now: wait again is what a caller
      // expects of Get, so report it as not there in time.
      return store_ops::WaitTimeout(data_, keys, timeout);
    }
    return it->second;
  });
}

absl::Status FileStore::Wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  return WaitFor(keys, timeout);
}

}  // namespace lockstep
