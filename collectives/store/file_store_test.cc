// FileStore beyond the Store contract (store_test.cc runs that on it too):
// processes sharing one file, Add's atomicity across them, a record cut
// short by a dead writer, foreign and corrupt files, and the file removed
// by the last of its users.
#include "collectives/store/file_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/store/file_store_format.h"
#include "core/testing/require_root.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

// A fresh path in a directory of its own, removed at the end.
class FileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/file_store_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/store";
  }
  void TearDown() override {
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  bool Exists() const {
    struct stat st {};
    return ::stat(path_.c_str(), &st) == 0;
  }
  std::string dir_, path_;
};

TEST_F(FileStoreTest, ProcessesShareOneFileAndAddIsAtomicAcrossThem) {
  constexpr int kProcesses = 4, kAdds = 200;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::alarm(60);  // A hung child dies instead of hanging the test.
      absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(path_);
      if (!store.ok()) ::_exit(10);
      for (int i = 0; i < kAdds; ++i) {
        if (!(*store)->Add("counter", 1).ok()) ::_exit(11);
      }
      if (!(*store)->Set(absl::StrCat("done/", p), "yes").ok()) ::_exit(12);
      // Each waits for all the others: Wait across processes.
      std::vector<std::string> all;
      for (int q = 0; q < kProcesses; ++q) all.push_back(absl::StrCat("done/", q));
      if (!(*store)->Wait(all, Milliseconds(30000)).ok()) ::_exit(13);
      ::_exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(path_);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*(*store)->Get("counter"), absl::StrCat(kProcesses * kAdds));
  EXPECT_EQ(*(*store)->NumKeys(), 1 + kProcesses);
}

TEST_F(FileStoreTest, ARecordCutShortByADeadWriterIsDropped) {
  {
    absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(path_);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Set("a", "1").ok());
  }
  // Half a record at the end, as a writer killed mid-append leaves it.
  const std::string half = file_store::Encode({file_store::Record::Kind::kSet, "b", "222222"}).substr(0, 7);
  std::ofstream(path_, std::ios::app | std::ios::binary) << half;
  absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(path_);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(*(*store)->Get("a"), "1");
  EXPECT_FALSE(*(*store)->Check({"b"}));
  // The next writer cuts it off, so its own record reads back.
  ASSERT_TRUE((*store)->Set("c", "3").ok());
  absl::StatusOr<std::unique_ptr<FileStore>> again = FileStore::Open(path_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*(*again)->Get("c", Milliseconds(1000)), "3");
  EXPECT_EQ(*(*again)->NumKeys(), 2);
}

TEST_F(FileStoreTest, ForeignAndCorruptFilesAreRefusedClearly) {
  std::ofstream(path_) << "not a store at all";
  ASSERT_EQ(::chmod(path_.c_str(), 0600), 0);  // Whatever the umask: only its content is wrong.
  absl::StatusOr<std::unique_ptr<FileStore>> foreign = FileStore::Open(path_);
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(foreign.status().message().find("is not a FileStore's file"), std::string::npos) << foreign.status();
  ::unlink(path_.c_str());
  {
    absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(path_);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Set("a", "1").ok());
  }
  std::ofstream(path_, std::ios::app | std::ios::binary) << std::string(1, '\x09') << "garbage";
  absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(path_);
  ASSERT_TRUE(store.ok());
  const absl::StatusOr<std::string> get = (*store)->Get("a");
  EXPECT_EQ(get.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(get.status().message().find("has kind 9"), std::string::npos) << get.status();
  EXPECT_FALSE(FileStore::Open("").ok());
  FileStoreOptions bad;
  bad.num_users = -1;
  EXPECT_NE(FileStore::Open(path_, bad).status().message().find("num_users is -1"), std::string::npos);
}

TEST_F(FileStoreTest, TheLastOfItsUsersRemovesTheFile) {
  FileStoreOptions options;
  options.num_users = 3;
  std::vector<std::unique_ptr<FileStore>> users;
  for (int i = 0; i < 3; ++i) users.push_back(*FileStore::Open(path_, options));
  ASSERT_TRUE(users[0]->Set("k", "v").ok());
  EXPECT_EQ(*users[2]->NumKeys(), 1);
  users[0].reset();
  users[1].reset();
  EXPECT_TRUE(Exists());
  users[2].reset();
  EXPECT_FALSE(Exists());
}

TEST_F(FileStoreTest, AFileThatShrinksIsAnError) {
  absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(path_);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Set("a", "123456").ok());
  ASSERT_EQ(::truncate(path_.c_str(), 9), 0);
  const absl::StatusOr<bool> check = (*store)->Check({"a"});
  EXPECT_EQ(check.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(check.status().message().find("shrank"), std::string::npos) << check.status();
}

// A file another local user created first at the path (in a sticky /tmp
// directory, say) is refused, not adopted with the keys that user wrote;
// the file is left as it was.
TEST_F(FileStoreTest, AFileAnotherUserCreatedFirstIsRefused) {
  LOCKSTEP_REQUIRE_ROOT("creating a file as uid 65534");
  ASSERT_EQ(::chmod(dir_.c_str(), 01777), 0);
  const std::string planted = absl::StrCat(file_store::kMagic, "planted records");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    bool ok = ::setgid(65534) == 0 && ::setuid(65534) == 0;
    const int fd = ok ? ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600) : -1;
    ok = fd >= 0 && ::write(fd, planted.data(), planted.size()) == static_cast<ssize_t>(planted.size());
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "uid 65534 could not create the file";
  absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(path_);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(store.status().message().find("is owned by uid 65534"), std::string::npos) << store.status();
  EXPECT_NE(store.status().message().find("not /tmp"), std::string::npos) << store.status();
  std::ifstream in(path_);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), planted);
}

// A file of this user's that others may write is refused too; once only
// its owner may write it again, it opens with every key it had.
TEST_F(FileStoreTest, AFileOthersMayWriteIsRefusedAndNothingIsLost) {
  {
    absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Set("rank0/addr", "10.0.0.2:4242").ok());
  }
  for (const auto& [mode, who] : {std::pair<mode_t, const char*>{0666, "writable by every user (mode 0666)"},
                                  std::pair<mode_t, const char*>{0620, "writable by its group (mode 0620)"}}) {
    ASSERT_EQ(::chmod(path_.c_str(), mode), 0);
    absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(path_);
    EXPECT_EQ(store.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_NE(store.status().message().find(who), std::string::npos) << store.status();
  }
  ASSERT_EQ(::chmod(path_.c_str(), 0600), 0);
  absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(path_);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*(*store)->Get("rank0/addr"), "10.0.0.2:4242");
}

}  // namespace
}  // namespace lockstep
