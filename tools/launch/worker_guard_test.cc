// The worker guard's own paths, each in a forked child that plays the
// guard (the test process plays the agent): a worker's exit code and
// signal are mirrored, and every bad start is refused with a message and
// exit code 127 — without a program, with a malformed pid, and when the
// guard does not lead its own process group (run by hand, killing "its"
// group would kill the caller's). A guard whose agent is already gone
// kills its group (itself) before starting the worker.
#include "tools/launch/worker_guard.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace launch {
namespace {

struct Ended {
  int status = 0;
  std::string stderr_text;
};

// Forks; the child optionally leads a new process group, then runs the
// guard with `args` (after argv[0]) and exits with its result. Waits at
// most 20 s for it to end (then kills it and fails).
Ended RunGuard(const std::vector<std::string>& args, bool own_group) {
  int err[2];
  if (::pipe(err) != 0) {
    ADD_FAILURE() << "pipe failed";
    return {};
  }
  const pid_t child = ::fork();
  if (child == 0) {
    ::dup2(err[1], 2);
    ::close(err[0]);
    ::close(err[1]);
    if (own_group) ::setpgid(0, 0);
    std::vector<std::string> storage = {"lockstep-run"};
    storage.insert(storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : storage) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::_exit(RunWorkerGuard(static_cast<int>(storage.size()), argv.data()));
  }
  ::close(err[1]);
  Ended ended;
  // The child's pidfd becomes readable when it exits: wait for that, with
  // the deadline.
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, child, 0));
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    if (::poll(&p, 1, 20000) != 1) {
      ::kill(child, SIGKILL);
      ADD_FAILURE() << "the guard did not end within 20 s";
    }
    ::close(pidfd);
  } else {
    ADD_FAILURE() << "pidfd_open failed: " << std::strerror(errno);
    ::kill(child, SIGKILL);
  }
  ::waitpid(child, &ended.status, 0);
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(err[0], buffer, sizeof(buffer))) > 0) ended.stderr_text.append(buffer, static_cast<size_t>(n));
  ::close(err[0]);
  return ended;
}

std::string Flag(long pid) { return absl::StrCat(kWorkerGuardFlag, pid); }

TEST(WorkerGuardTest, MirrorsTheWorkersExitCode) {
  const Ended e = RunGuard({Flag(::getpid()), "/bin/sh", "-c", "exit 7"}, /*own_group=*/true);
  ASSERT_TRUE(WIFEXITED(e.status)) << e.stderr_text;
  EXPECT_EQ(WEXITSTATUS(e.status), 7);
}

TEST(WorkerGuardTest, MirrorsTheWorkersSignalThoughItIgnoresThatSignalItself) {
  // SIGTERM is what the agent forwards: the guard ignores it, the worker
  // does not, and the guard then ends by it too.
  const Ended e = RunGuard({Flag(::getpid()), "/bin/sh", "-c", "kill -TERM $$"}, /*own_group=*/true);
  ASSERT_TRUE(WIFSIGNALED(e.status)) << e.stderr_text;
  EXPECT_EQ(WTERMSIG(e.status), SIGTERM);
}

TEST(WorkerGuardTest, RefusesToStartWithoutAProgram) {
  const Ended e = RunGuard({Flag(::getpid())}, /*own_group=*/true);
  ASSERT_TRUE(WIFEXITED(e.status));
  EXPECT_EQ(WEXITSTATUS(e.status), 127);
  EXPECT_NE(e.stderr_text.find("needs the agent's pid and a program"), std::string::npos) << e.stderr_text;
  EXPECT_NE(e.stderr_text.find("no program"), std::string::npos) << e.stderr_text;
}

TEST(WorkerGuardTest, RefusesAMalformedPid) {
  for (const std::string bad : {"12x", "", "-5", "0", "99999999999999"}) {
    const Ended e = RunGuard({std::string(kWorkerGuardFlag) + bad, "/bin/true"}, /*own_group=*/true);
    ASSERT_TRUE(WIFEXITED(e.status)) << bad;
    EXPECT_EQ(WEXITSTATUS(e.status), 127) << bad;
    EXPECT_NE(e.stderr_text.find("got '" + bad + "'"), std::string::npos) << e.stderr_text;
  }
}

TEST(WorkerGuardTest, RefusesToRunOutsideAGroupOfItsOwn) {
  // The child stays in this test's process group: a guard that killed
  // "its" group here would kill this test.
  const std::string marker = absl::StrCat(::testing::TempDir(), "/worker_ran_", ::getpid());
  const Ended e = RunGuard({Flag(::getpid()), "/usr/bin/touch", marker}, /*own_group=*/false);
  ASSERT_TRUE(WIFEXITED(e.status)) << e.stderr_text;
  EXPECT_EQ(WEXITSTATUS(e.status), 127);
  EXPECT_NE(e.stderr_text.find("must lead its own process group"), std::string::npos) << e.stderr_text;
  struct stat st;
  EXPECT_NE(::stat(marker.c_str(), &st), 0) << "the worker ran";
}

TEST(WorkerGuardTest, AGuardWhoseAgentIsGoneKillsItsGroupBeforeTheWorkerStarts) {
  // Its parent (this test) is not the agent named: as if the agent had
  // died before the guard set its parent-death signal.
  const std::string marker = absl::StrCat(::testing::TempDir(), "/orphan_worker_ran_", ::getpid());
  pid_t not_parent = ::getpid() + 1;
  if (not_parent == ::getpid()) not_parent = 1;
  const Ended e = RunGuard({Flag(not_parent), "/usr/bin/touch", marker}, /*own_group=*/true);
  ASSERT_TRUE(WIFSIGNALED(e.status)) << e.stderr_text;
  EXPECT_EQ(WTERMSIG(e.status), SIGKILL);
  struct stat st;
  EXPECT_NE(::stat(marker.c_str(), &st), 0) << "the worker ran";
}

}  // namespace
}  // namespace launch
}  // namespace lockstep
