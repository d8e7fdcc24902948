// The flight recorder's dump on failure (CommunicatorOptions::dump_on_failure)
// against another local user: this kernel does not protect symlinks in
// sticky directories (fs.protected_symlinks = 0), so the dump itself must
// never follow one. Runs unsandboxed (tag "local"): Bazel's sandbox cannot
// switch to uid 65534.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/testing/group.h"
#include "core/testing/require_root.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using testing::RunThreads;
using testing::TestOptions;

// A directory under /tmp that anyone may write to (sticky, as /tmp is),
// removed with everything in it.
class SharedTmpDir {
 public:
  SharedTmpDir() {
    char name[] = "/tmp/lockstep_dump_XXXXXX";
    if (::mkdtemp(name) != nullptr && ::chmod(name, 01777) == 0) path_ = name;
  }
  ~SharedTmpDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Another local user plants a symlink at the name a dump's temporary file
// once had (<path>.tmp), pointing at a file of root's: the dump must neither
// write through it nor rename it into place, and must still be written.
TEST(FlightRecorderFaultTest, DumpNeverFollowsAnotherUsersSymlink) {
  LOCKSTEP_REQUIRE_ROOT("planting files as uid 65534");
  SharedTmpDir dir;
  ASSERT_FALSE(dir.path().empty()) << "could not make a directory under /tmp";
  const std::string victim = dir.path() + "/victim", dump = dir.path() + "/flight_recorder_rank0.json";
  { std::ofstream(victim) << "precious"; }
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const bool ok =
        ::setgid(65534) == 0 && ::setuid(65534) == 0 && ::symlink(victim.c_str(), (dump + ".tmp").c_str()) == 0;
    ::_exit(ok ? 0 : 1);
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << "uid 65534 could not plant its symlinks";

  TcpCommunicatorOptions options = TestOptions();
  options.communicator.dump_on_failure = dir.path();
  const std::vector<absl::Status> results = RunThreads(
      2,
      [](Communicator& comm) -> absl::Status {
        Tensor t = *Tensor::Zeros({comm.rank() == 0 ? 8 : 9}, DType::kF32);  // A size mismatch.
        (void)comm.AllReduce(t, ReduceOp::kSum)->Wait();
        return absl::OkStatus();
      },
      options);
  EXPECT_EQ(ReadFile(victim), "precious");
  struct stat st;
  ASSERT_EQ(::lstat((dump + ".tmp").c_str(), &st), 0) << "the planted symlink was moved";
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  ASSERT_EQ(::lstat(dump.c_str(), &st), 0) << "no dump was written";
  EXPECT_TRUE(S_ISREG(st.st_mode)) << "the dump is not a regular file of its own";
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_NE(ReadFile(dump).find("\"state\":\"failed\""), std::string::npos);
}

}  // namespace
}  // namespace lockstep
