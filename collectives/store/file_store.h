// FileStore: a Store in one file, for ranks that share a file system but
// have no address to meet at (c10d's FileStore, torch's file:// init).
//
//   FileStoreOptions options;
//   options.num_users = world_size;  // the last to close removes the file
//   // shared_dir: a directory every rank sees ("/shared/jobs")
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FileStore> store,
//                             FileStore::Open(shared_dir + "/job42.store", options));
//   LOCKSTEP_RETURN_IF_ERROR(store->Set("rank0/addr", "10.0.0.2:4242"));
//
// The file is an append-only log of set and delete records
// (collectives/store/file_store_format.h). Every operation takes an flock()
// on the file (shared to read, exclusive to write; Add and CompareSet read
// and append under one exclusive lock, so they are atomic across
// processes), reads what other processes appended since its last look, and
// appends its own record. Get and Wait poll the file (1 ms, doubling to 16
// ms) until the keys exist or the timeout passes. Any number of processes
// and threads may share one file; the Store contract is the TCP store's
// (collectives/store/store.h), checked by the same tests.
//
// Limits and trust: keys up to 64 KiB, values up to 1 GiB (a record that
// claims more is refused as corrupt before anything is allocated); the
// file is created readable and writable by its owner only (0600). Anyone
// who can write it can change every value, so Open refuses a file owned by
// another user (one created first at a guessable path in /tmp) or writable
// by its group or others, naming the owner or the mode: put it where only
// the job's user writes. A record cut short by a process that died while
// appending is ignored and removed by the next writer. The file only
// grows (every Set appends); `num_users` processes each opening and
// closing one FileStore remove it when the last closes, as c10d's
// FileStore(path, numWorkers) does.
#ifndef LOCKSTEP_COLLECTIVES_STORE_FILE_STORE_H_
#define LOCKSTEP_COLLECTIVES_STORE_FILE_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/store/store.h"
#include "core/fd.h"

namespace lockstep {

struct FileStoreOptions {
  // Blocking calls' default timeout (Store::timeout()). > 0.
  Milliseconds timeout = kDefaultStoreTimeout;
  // How many FileStores (one per rank) share the file; when that many have
  // been closed, the last removes the file. 0: the file stays. >= 0.
  int num_users = 0;
};

class FileStore : public Store {
 public:
  // Creates the file if it does not exist; refuses one that is not a
  // FileStore's (naming what its first bytes are).
  static absl::StatusOr<std::unique_ptr<FileStore>> Open(std::string path, FileStoreOptions options = {});
  ~FileStore() override;
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, Milliseconds timeout) override;
  using Store::Get;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override;
  absl::Status Wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  using Store::Wait;
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys) override;
  absl::StatusOr<bool> DeleteKey(absl::string_view key) override;
  absl::StatusOr<int64_t> NumKeys() override;

  const std::string& path() const { return path_; }

 private:
  FileStore(std::string path, Fd fd, FileStoreOptions options);

  // Under mu_ and a file lock: applies what was appended since offset_.
  // `writer` (an exclusive lock): an incomplete last record is cut off.
  absl::Status CatchUp(bool writer);
  // Under mu_ and the exclusive lock: appends a set record (or, without
  // `set`, a delete record) and applies it.
  absl::Status Append(bool set, absl::string_view key, absl::string_view value);
  // Runs fn with mu_ held and the file locked (exclusive or shared), up to
  // date.
  template <typename Fn>
  auto Locked(bool exclusive, Fn&& fn) -> decltype(fn());
  // Polls until every key exists or the deadline.
  absl::Status WaitFor(const std::vector<std::string>& keys, Milliseconds timeout);

  const std::string path_;
  const Fd fd_;
  const FileStoreOptions options_;
  std::mutex mu_;  // Guards the two below; one operation of this process at a time.
  std::map<std::string, std::string, std::less<>> data_;
  uint64_t offset_ = 0;  // Bytes of the file applied to data_.
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_STORE_FILE_STORE_H_
