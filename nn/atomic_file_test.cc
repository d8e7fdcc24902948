#include "nn/atomic_file.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

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
  return ::stat(path.c_str(), &st) == 0;
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
  EXPECT_FALSE(Exists(absl::StrCat(path, ".tmp.", ::getpid())));
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
  const std::string leftover = absl::StrCat(path, ".tmp.", child);
  EXPECT_EQ(ReadAll(leftover), std::string(100000, 'N'));
  ::unlink(leftover.c_str());

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
  ::unlink(absl::StrCat(path, ".tmp.", child).c_str());
}

TEST(AtomicFileTest, MissingDirectoryIsAClearError) {
  const std::string path = TempPath("no_such_dir/model.safetensors");
  const absl::Status s = WriteFileAtomically(path, "data");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), absl::StrCat("WriteFileAtomically(", path, "): cannot create the temporary file ",
                                      path, ".tmp.", ::getpid(),
                                      ": No such file or directory; create the directory first "
                                      "(the previous file, if any, is unchanged)"));
}

TEST(AtomicFileTest, RenameOverADirectoryFailsAndRemovesTheTemporaryFile) {
  const std::string path = TempPath("atomic_dir_target");
  ASSERT_EQ(::mkdir(path.c_str(), 0755), 0);
  const absl::Status s = WriteFileAtomically(path, "data");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("renaming"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("Is a directory"), absl::string_view::npos) << s;
  EXPECT_FALSE(Exists(absl::StrCat(path, ".tmp.", ::getpid())));
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
  EXPECT_EQ(r.status().message(), absl::StrCat("ReadFileToString(", path,
                                               "): cannot open: No such file or directory; check the path"));
}

}  // namespace
}  // namespace lockstep
