#include "core/subprocess.h"

#include <sched.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::std::chrono::milliseconds;

// Every wait in these tests is bounded, so a bug fails the test instead of
// hanging it until Bazel's timeout.
Subprocess::Deadline Soon() { return Subprocess::Clock::now() + milliseconds(30000); }

SubprocessOptions Shell(const std::string& script) {
  SubprocessOptions options;
  options.argv = {"/bin/sh", "-c", script};
  return options;
}

// A child that runs until it is signalled (its work, not a synchronization).
SubprocessOptions Forever() {
  SubprocessOptions options;
  options.argv = {"/bin/sleep", "1000"};
  return options;
}

absl::StatusOr<ExitStatus> RunShell(const std::string& script) {
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(Shell(script));
  if (!child.ok()) return child.status();
  return child->Wait(Soon());
}

TEST(ExitStatusTest, Describes) {
  EXPECT_EQ(ExitStatus::Exited(3).ToString(), "exited with code 3");
  EXPECT_TRUE(ExitStatus::Exited(0).success());
  EXPECT_FALSE(ExitStatus::Exited(1).success());
  const ExitStatus killed = ExitStatus::Signaled(SIGKILL);
  EXPECT_TRUE(killed.signaled());
  EXPECT_FALSE(killed.success());
  EXPECT_EQ(killed.signal(), SIGKILL);
  EXPECT_EQ(killed.exit_code(), -1);
  EXPECT_EQ(killed.ToString().rfind("killed by signal 9", 0), 0u) << killed.ToString();
}

TEST(SubprocessTest, ReportsExitCodes) {
  for (int code : {0, 1, 3, 255}) {
    absl::StatusOr<ExitStatus> status = RunShell(absl::StrCat("exit ", code));
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_EQ(*status, ExitStatus::Exited(code));
  }
}

TEST(SubprocessTest, ReportsDeathBySignal) {
  absl::StatusOr<ExitStatus> status = RunShell("kill -TERM $$");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, ExitStatus::Signaled(SIGTERM));
}

TEST(SubprocessTest, SignalAndKill) {
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(Forever());
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_GT(child->pid(), 0);
  ASSERT_TRUE(child->Signal(SIGTERM).ok());
  absl::StatusOr<ExitStatus> status = child->Wait(Soon());
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, ExitStatus::Signaled(SIGTERM));
  // Reaped: waiting again gives the same answer; signals are no-ops.
  EXPECT_TRUE(child->reaped());
  EXPECT_EQ(*child->Wait(), ExitStatus::Signaled(SIGTERM));
  EXPECT_TRUE(child->Signal(SIGTERM).ok());
  EXPECT_TRUE(child->Kill().ok());

  absl::StatusOr<Subprocess> other = Subprocess::Spawn(Forever());
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_TRUE(other->Kill().ok());
  EXPECT_EQ(*other->Wait(Soon()), ExitStatus::Signaled(SIGKILL));
}

TEST(SubprocessTest, DeadlineExpiresWithoutKilling) {
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(Forever());
  ASSERT_TRUE(child.ok()) << child.status();
  const auto start = Subprocess::Clock::now();
  absl::StatusOr<ExitStatus> status = child->Wait(start + milliseconds(50));
  EXPECT_GE(Subprocess::Clock::now() - start, milliseconds(50));
  ASSERT_EQ(status.status().code(), absl::StatusCode::kDeadlineExceeded) << status.status();
  EXPECT_NE(status.status().message().find("/bin/sleep"), absl::string_view::npos) << status.status();
  // Still running and still ours.
  EXPECT_FALSE(child->reaped());
  int wstatus = 0;
  EXPECT_EQ(waitpid(child->pid(), &wstatus, WNOHANG), 0);
  // A deadline already past does not block.
  EXPECT_EQ(child->Wait(Subprocess::Clock::now()).status().code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(child->Kill().ok());
  EXPECT_EQ(*child->Wait(Soon()), ExitStatus::Signaled(SIGKILL));
}

TEST(SubprocessTest, DestructorKillsAndReaps) {
  pid_t pid;
  {
    absl::StatusOr<Subprocess> child = Subprocess::Spawn(Forever());
    ASSERT_TRUE(child.ok()) << child.status();
    pid = child->pid();
    Subprocess moved = std::move(*child);  // The moved-from one owns nothing.
    EXPECT_EQ(child->pid(), -1);
    EXPECT_EQ(moved.pid(), pid);
  }
  // Reaped: no such child any more (not even a zombie).
  int wstatus = 0;
  EXPECT_EQ(waitpid(pid, &wstatus, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(SubprocessTest, MoveAssignmentReleasesTheOldChild) {
  absl::StatusOr<Subprocess> first = Subprocess::Spawn(Forever());
  absl::StatusOr<Subprocess> second = Subprocess::Spawn(Shell("exit 7"));
  ASSERT_TRUE(first.ok() && second.ok());
  const pid_t first_pid = first->pid();
  *first = std::move(*second);
  int wstatus = 0;
  EXPECT_EQ(waitpid(first_pid, &wstatus, WNOHANG), -1);  // Killed and reaped.
  EXPECT_EQ(*first->Wait(Soon()), ExitStatus::Exited(7));
}

TEST(SubprocessTest, ExecFailureNamesTheProgram) {
  SubprocessOptions missing;
  missing.argv = {"/nonexistent/lockstep-program", "--flag"};
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(missing);
  ASSERT_EQ(child.status().code(), absl::StatusCode::kNotFound) << child.status();
  EXPECT_NE(child.status().message().find("/nonexistent/lockstep-program"), absl::string_view::npos);
  EXPECT_NE(child.status().message().find("No such file"), absl::string_view::npos) << child.status();

  SubprocessOptions not_executable;
  not_executable.argv = {"/etc/hostname"};
  if (access("/etc/hostname", X_OK) != 0 && access("/etc/hostname", F_OK) == 0) {
    child = Subprocess::Spawn(not_executable);
    EXPECT_EQ(child.status().code(), absl::StatusCode::kPermissionDenied) << child.status();
  }

  EXPECT_EQ(Subprocess::Spawn(SubprocessOptions()).status().code(), absl::StatusCode::kInvalidArgument);
  SubprocessOptions bad_env = Shell("exit 0");
  bad_env.env = {{"A=B", "x"}};
  EXPECT_EQ(Subprocess::Spawn(bad_env).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SubprocessTest, PassesEnvironmentOnTopOfOurs) {
  // PATH is replaced, the last of two settings wins, and an unrelated
  // variable of this process (TEST_TMPDIR, set by Bazel) is inherited.
  const char* inherited = std::getenv("TEST_TMPDIR");
  ASSERT_NE(inherited, nullptr);
  SubprocessOptions options = Shell(
      absl::StrCat("test \"$PATH\" = /nonexistent && test \"$LOCKSTEP_X\" = 'two words' && test \"$TEST_TMPDIR\" = '",
                   inherited, "' && test -z \"$LOCKSTEP_EMPTY\" && test \"${LOCKSTEP_EMPTY+set}\" = set"));
  options.env = {
      {"PATH", "/nonexistent"}, {"LOCKSTEP_X", "first"}, {"LOCKSTEP_X", "two words"}, {"LOCKSTEP_EMPTY", ""}};
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(*child->Wait(Soon()), ExitStatus::Exited(0));
}

TEST(SubprocessTest, InheritsOnlyTheNamedDescriptors) {
  int kept[2], hidden[2];
  ASSERT_EQ(pipe2(kept, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(hidden, O_CLOEXEC), 0);
  SubprocessOptions options = Shell(absl::StrCat("echo hello >&", kept[1], " && ! (echo no >&", hidden[1], ")"));
  options.inherit_fds = {kept[1]};
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
  ASSERT_TRUE(child.ok()) << child.status();
  close(kept[1]);
  close(hidden[1]);
  std::string text;
  char buffer[64];
  ssize_t n;
  while ((n = read(kept[0], buffer, sizeof(buffer))) > 0) text.append(buffer, static_cast<size_t>(n));
  EXPECT_EQ(text, "hello\n");
  EXPECT_EQ(read(hidden[0], buffer, sizeof(buffer)), 0);  // Nobody else held its write end.
  close(kept[0]);
  close(hidden[0]);
  EXPECT_EQ(*child->Wait(Soon()), ExitStatus::Exited(0));
}

TEST(SubprocessTest, NewProcessGroupKillsDescendants) {
  int ready[2];
  ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
  // The shell starts a grandchild, tells us its pid, then waits for it.
  SubprocessOptions options = Shell(absl::StrCat("/bin/sleep 1000 & echo $! >&", ready[1], "; wait"));
  options.new_process_group = true;
  options.inherit_fds = {ready[1]};
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
  ASSERT_TRUE(child.ok()) << child.status();
  close(ready[1]);
  EXPECT_EQ(getpgid(child->pid()), child->pid());
  // One line: the grandchild holds the write end too, so no EOF comes.
  std::string text;
  char c;
  while (text.find('\n') == std::string::npos && read(ready[0], &c, 1) == 1) text.push_back(c);
  close(ready[0]);
  const pid_t grandchild = std::atoi(text.c_str());
  ASSERT_GT(grandchild, 0) << text;
  EXPECT_EQ(getpgid(grandchild), child->pid());
  // Not our child: watch it through its own pidfd, readable once it ends.
  const int grandchild_fd = static_cast<int>(syscall(SYS_pidfd_open, grandchild, 0));
  ASSERT_GE(grandchild_fd, 0) << errno;
  ASSERT_TRUE(child->Kill().ok());
  EXPECT_EQ(*child->Wait(Soon()), ExitStatus::Signaled(SIGKILL));
  pollfd p{grandchild_fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 30000), 1);
  close(grandchild_fd);

  SubprocessOptions plain = Shell("exit 0");
  EXPECT_EQ(Subprocess::Spawn(plain)->SignalGroup(SIGTERM).code(), absl::StatusCode::kFailedPrecondition);
}

std::string ReadAll(int fd) {
  std::string text;
  char buffer[64];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) text.append(buffer, static_cast<size_t>(n));
  return text;
}

TEST(SubprocessTest, RedirectsStdoutAndStderr) {
  int out[2], err[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(err, O_CLOEXEC), 0);
  SubprocessOptions options = Shell("echo to-out; echo to-err >&2");
  options.stdout_fd = out[1];
  options.stderr_fd = err[1];
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
  ASSERT_TRUE(child.ok()) << child.status();
  close(out[1]);
  close(err[1]);
  EXPECT_EQ(ReadAll(out[0]), "to-out\n");
  EXPECT_EQ(ReadAll(err[0]), "to-err\n");
  close(out[0]);
  close(err[0]);
  EXPECT_EQ(*child->Wait(Soon()), ExitStatus::Exited(0));
}

TEST(SubprocessTest, ParentDeathSignalReachesTheChildWhenItsSpawnerEnds) {
  // The kernel sends the signal when the spawning *thread* ends, so a thread
  // that spawns and returns plays the part of a parent that dies.
  absl::StatusOr<Subprocess> child = absl::InternalError("not spawned");
  std::thread spawner([&] {
    SubprocessOptions options = Forever();
    options.parent_death_signal = SIGKILL;
    child = Subprocess::Spawn(options);
  });
  spawner.join();
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(*child->Wait(Soon()), ExitStatus::Signaled(SIGKILL));
}

TEST(SubprocessTest, AlarmBoundsAHungChild) {
  SubprocessOptions options = Forever();
  options.alarm_seconds = 1;
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(*child->Wait(Soon()), ExitStatus::Signaled(SIGALRM));
}

TEST(SubprocessTest, BindsTheChildToTheCpusGiven) {
  const std::vector<int> allowed = AllowedCpus();
  ASSERT_FALSE(allowed.empty());
  const int cpu = allowed.back();
  // The kernel's view of the child's affinity, compared in the child.
  SubprocessOptions options =
      Shell(absl::StrCat("test \"$(grep Cpus_allowed_list /proc/self/status | cut -f2)\" = ", cpu));
  options.cpus = {cpu};
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
  ASSERT_TRUE(child.ok()) << child.status();
  absl::StatusOr<ExitStatus> status = child->Wait();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(status->success()) << status->ToString();
}

TEST(SubprocessTest, ACpuThisProcessMayNotUseIsRefused) {
  SubprocessOptions options = Shell("exit 0");
  options.cpus = {CPU_SETSIZE - 1};  // Not a CPU of this machine.
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
  ASSERT_FALSE(child.ok());
  EXPECT_EQ(child.status().code(), absl::StatusCode::kInvalidArgument) << child.status();
  options.cpus = {-1};
  EXPECT_EQ(Subprocess::Spawn(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(WaitAnyTest, ReturnsWhichChildEndedFirst) {
  std::vector<Subprocess> children;
  for (const SubprocessOptions& options : {Forever(), Shell("exit 4"), Forever()}) {
    absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
    ASSERT_TRUE(child.ok()) << child.status();
    children.push_back(std::move(*child));
  }
  absl::StatusOr<WaitAnyResult> ended = WaitAny(absl::MakeSpan(children), Soon());
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(ended->index, 1u);
  EXPECT_EQ(ended->status, ExitStatus::Exited(4));
  EXPECT_TRUE(children[1].reaped());
  EXPECT_EQ(children[1].exit_status(), ExitStatus::Exited(4));

  // The others still run: the deadline passes, nothing is killed.
  ended = WaitAny(absl::MakeSpan(children), Subprocess::Clock::now() + milliseconds(20));
  EXPECT_EQ(ended.status().code(), absl::StatusCode::kDeadlineExceeded) << ended.status();
  EXPECT_FALSE(children[0].reaped());
  EXPECT_FALSE(children[2].reaped());

  ASSERT_TRUE(children[2].Signal(SIGTERM).ok());
  ended = WaitAny(absl::MakeSpan(children), Soon());
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(ended->index, 2u);
  EXPECT_EQ(ended->status, ExitStatus::Signaled(SIGTERM));

  ASSERT_TRUE(children[0].Kill().ok());
  ended = WaitAny(absl::MakeSpan(children), Soon());
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(ended->index, 0u);
  EXPECT_EQ(ended->status, ExitStatus::Signaled(SIGKILL));

  EXPECT_EQ(WaitAny(absl::MakeSpan(children), Soon()).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(WaitAnyTest, SeveralEndedAreReturnedOneByOne) {
  std::vector<Subprocess> children;
  for (int code : {5, 6}) {
    absl::StatusOr<Subprocess> child = Subprocess::Spawn(Shell(absl::StrCat("exit ", code)));
    ASSERT_TRUE(child.ok()) << child.status();
    children.push_back(std::move(*child));
  }
  // Both end; wait for each, then WaitAny hands them out lowest index first.
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<WaitAnyResult> ended = WaitAny(absl::MakeSpan(children), Soon());
    ASSERT_TRUE(ended.ok()) << ended.status();
    EXPECT_EQ(ended->status, ExitStatus::Exited(5 + static_cast<int>(ended->index)));
  }
  EXPECT_TRUE(children[0].reaped() && children[1].reaped());
}

}  // namespace
}  // namespace lockstep
