#include "core/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// Names in the test directory that start with `<basename of path>.tmp.`.
std::vector<std::string> TempFilesOf(const std::string& path) {
  const std::string prefix = path.substr(path.rfind('/') + 1) + ".tmp.";
  std::vector<std::string> names;
  DIR* dir = ::opendir(path.substr(0, path.rfind('/')).c_str());
  if (dir == nullptr) return names;
  while (const dirent* e = ::readdir(dir)) {
    if (absl::StartsWith(e->d_name, prefix)) names.push_back(path.substr(0, path.rfind('/') + 1) + e->d_name);
  }
  ::closedir(dir);
  return names;
}

bool IsRandomTempName(const std::string& temp, const std::string& path) {
  const std::string prefix = path + ".tmp.";
  if (temp.size() != prefix.size() + 16 || !absl::StartsWith(temp, prefix)) return false;
  for (char c : temp.substr(prefix.size())) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

void SetAgeSeconds(const std::string& path, int seconds) {
  timespec times[2];
  times[0].tv_sec = times[1].tv_sec = ::time(nullptr) - seconds;
  times[0].tv_nsec = times[1].tv_nsec = 0;
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW), 0) << path;
}

TEST(AtomicFileTest, WritesOverwritesAndReadsBack) {
  const std::string path = TempPath("atomic_basic");
  ASSERT_TRUE(WriteFileAtomically(path, "first version").ok());
  EXPECT_EQ(ReadAll(path), "first version");
  ASSERT_TRUE(WriteFileAtomically(path, std::string("x\0y", 3)).ok());
  EXPECT_EQ(ReadAll(path), std::string("x\0y", 3));
  absl::StatusOr<std::string> back = ReadFileToString(path, 3);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, std::string("x\0y", 3));
  // No temporary file is left behind.
  EXPECT_TRUE(TempFilesOf(path).empty());
}

TEST(AtomicFileTest, EmptyAndLargeContents) {
  const std::string path = TempPath("atomic_sizes");
  ASSERT_TRUE(WriteFileAtomically(path, "").ok());
  EXPECT_EQ(*ReadFileToString(path, 0), "");
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + i / 4096);
  ASSERT_TRUE(WriteFileAtomically(path, big).ok());
  absl::StatusOr<std::string> back = ReadFileToString(path, big.size());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == big);
}

TEST(AtomicFileTest, FileModeIs0644LessUmask) {
  const std::string path = TempPath("atomic_mode");
  ASSERT_TRUE(WriteFileAtomically(path, "m").ok());
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  const mode_t mask = ::umask(0);
  ::umask(mask);
  EXPECT_EQ(st.st_mode & 0777, 0644 & ~mask);
}

TEST(AtomicFileTest, CrashMidWriteLeavesThePreviousFileIntact) {
  const std::string path = TempPath("atomic_crash");
  const std::string previous = "previous checkpoint contents\n";
  ASSERT_TRUE(WriteFileAtomically(path, previous).ok());

  const std::string replacement(1 << 20, 'N');
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::alarm(60);  // Deadline: a hung child dies by SIGALRM and fails the test.
    AtomicWriteOptions options;
    options.testing_crash_after_bytes = 100000;
    (void)WriteFileAtomically(path, replacement, options);
    std::_Exit(1);  // Not reached when the simulated crash happens.
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the writer died by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), kSimulatedCrashExitCode);

  EXPECT_EQ(ReadAll(path), previous);
  // The dead writer's partial temporary file is what a crash leaves behind.
  const std::vector<std::string> leftovers = TempFilesOf(path);
  ASSERT_EQ(leftovers.size(), 1u);
  EXPECT_TRUE(IsRandomTempName(leftovers[0], path)) << leftovers[0];
  EXPECT_EQ(ReadAll(leftovers[0]), std::string(100000, 'N'));
  ::unlink(leftovers[0].c_str());

  ASSERT_TRUE(WriteFileAtomically(path, replacement).ok());
  EXPECT_TRUE(ReadAll(path) == replacement);
}

TEST(AtomicFileTest, CrashAfterAllBytesBeforeRenameLeavesThePreviousFile) {
  const std::string path = TempPath("atomic_crash_late");
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::alarm(60);  // Deadline: a hung child dies by SIGALRM and fails the test.
    AtomicWriteOptions options;
    options.testing_crash_after_bytes = 3;
    (void)WriteFileAtomically(path, "new", options);
    std::_Exit(1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the writer died by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), kSimulatedCrashExitCode);
  EXPECT_EQ(ReadAll(path), "old");
  for (const std::string& leftover : TempFilesOf(path)) ::unlink(leftover.c_str());
}

TEST(AtomicFileTest, MissingDirectoryIsAClearError) {
  const std::string path = TempPath("no_such_dir/model.safetensors");
  const absl::Status s = WriteFileAtomically(path, "data");
  ASSERT_FALSE(s.ok());
  const std::string prefix = absl::StrCat("WriteFileAtomically(", path, "): cannot create the temporary file ");
  const std::string suffix =
      ": No such file or directory; create the directory first "
      "(the previous file, if any, is unchanged)";
  ASSERT_TRUE(absl::StartsWith(s.message(), prefix)) << s;
  ASSERT_TRUE(absl::EndsWith(s.message(), suffix)) << s;
  const absl::string_view temp = s.message().substr(prefix.size(), s.message().size() - prefix.size() - suffix.size());
  EXPECT_TRUE(IsRandomTempName(std::string(temp), path)) << temp;
}

TEST(AtomicFileTest, RenameOverADirectoryFailsAndRemovesTheTemporaryFile) {
  const std::string path = TempPath("atomic_dir_target");
  ASSERT_EQ(::mkdir(path.c_str(), 0755), 0);
  const absl::Status s = WriteFileAtomically(path, "data");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("renaming"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("Is a directory"), absl::string_view::npos) << s;
  EXPECT_TRUE(TempFilesOf(path).empty());
  ::rmdir(path.c_str());
}

TEST(AtomicFileTest, ReadEnforcesMaxBytes) {
  const std::string path = TempPath("atomic_max");
  ASSERT_TRUE(WriteFileAtomically(path, "0123456789").ok());
  EXPECT_EQ(*ReadFileToString(path, 10), "0123456789");
  const absl::StatusOr<std::string> r = ReadFileToString(path, 9);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(),
            absl::StrCat("ReadFileToString(", path,
                         "): the file has 10 bytes, more than the limit of 9; raise max_bytes if the "
                         "file is expected to be this large"));
}

TEST(AtomicFileTest, ReadMissingFileIsNotFound) {
  const std::string path = TempPath("atomic_missing");
  const absl::StatusOr<std::string> r = ReadFileToString(path, 100);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(),
            absl::StrCat("ReadFileToString(", path, "): cannot open: No such file or directory; check the path"));
}

// Symlinks planted at the old guessable name (`.tmp.<pid>`) and at the name
// the writer tries first are not followed: their targets stay untouched, a
// dangling one is not created, and the write still lands at `path`.
TEST(AtomicFileTest, PlantedSymlinksAtTempNamesAreNotFollowed) {
  const std::string path = TempPath("atomic_symlink");
  const std::string victim = TempPath("atomic_symlink_victim");
  const std::string absent = TempPath("atomic_symlink_absent");
  ASSERT_TRUE(WriteFileAtomically(victim, "victim").ok());
  const std::string guessable = absl::StrCat(path, ".tmp.", ::getpid());
  const std::string first = path + ".tmp.0123456789abcdef";
  const std::string dangling = path + ".tmp.fedcba9876543210";
  ASSERT_EQ(::symlink(victim.c_str(), guessable.c_str()), 0);
  ASSERT_EQ(::symlink(victim.c_str(), first.c_str()), 0);
  ASSERT_EQ(::symlink(absent.c_str(), dangling.c_str()), 0);
  for (const std::string& forced : {std::string("0123456789abcdef"), std::string("fedcba9876543210")}) {
    AtomicWriteOptions options;
    options.testing_first_temp_suffix = forced;
    ASSERT_TRUE(WriteFileAtomically(path, "payload", options).ok());
    EXPECT_EQ(ReadAll(path), "payload");
    EXPECT_EQ(ReadAll(victim), "victim");
    EXPECT_FALSE(Exists(absent));
  }
  struct stat st;
  ASSERT_EQ(::lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  // The planted links are left alone (they are not ours), and nothing else remains.
  EXPECT_EQ(TempFilesOf(path).size(), 3u);
  for (const std::string& link : {guessable, first, dangling}) ::unlink(link.c_str());
}

// Opted in, leftovers of killed writers (our exact pattern, older than the
// cut-off) are removed by the next write of the same path; anything else is
// kept. By default nothing is removed.
TEST(AtomicFileTest, NextWriteRemovesStaleTempFilesOnly) {
  const std::string path = TempPath("atomic_stale");
  const std::string other = TempPath("atomic_stale_other");
  const std::string stale = path + ".tmp.00112233445566aa";
  const std::string fresh = path + ".tmp.00112233445566bb";
  const std::string old_pid_style = path + ".tmp.12345";
  const std::string not_hex = path + ".tmp.00112233445566ag";
  const std::string upper_hex = path + ".tmp.00112233445566AA";
  const std::string other_stale = other + ".tmp.00112233445566aa";
  const std::string stale_link = path + ".tmp.00112233445566cc";
  for (const std::string& f : {stale, fresh, old_pid_style, not_hex, upper_hex, other_stale}) {
    std::ofstream(f) << "leftover";
  }
  ASSERT_EQ(::symlink(other_stale.c_str(), stale_link.c_str()), 0);
  for (const std::string& f : {stale, old_pid_style, not_hex, upper_hex, other_stale, stale_link}) {
    SetAgeSeconds(f, 7200);
  }
  SetAgeSeconds(fresh, 60);

  // The default leaves every leftover alone.
  ASSERT_TRUE(WriteFileAtomically(path, "first").ok());
  EXPECT_TRUE(Exists(stale));
  AtomicWriteOptions clean;
  clean.stale_temp_age = std::chrono::seconds(3600);
  ASSERT_TRUE(WriteFileAtomically(path, "new", clean).ok());
  EXPECT_EQ(ReadAll(path), "new");
  EXPECT_FALSE(Exists(stale));
  for (const std::string& f : {fresh, old_pid_style, not_hex, upper_hex, other_stale, stale_link}) {
    EXPECT_TRUE(Exists(f)) << f;
  }
  // A negative age keeps every leftover.
  SetAgeSeconds(fresh, 7200);
  AtomicWriteOptions keep;
  keep.stale_temp_age = std::chrono::seconds(-1);
  ASSERT_TRUE(WriteFileAtomically(path, "again", keep).ok());
  EXPECT_TRUE(Exists(fresh));
  for (const std::string& f : {fresh, old_pid_style, not_hex, upper_hex, other_stale, stale_link}) {
    ::unlink(f.c_str());
  }
}

}  // namespace
}  // namespace lockstep
