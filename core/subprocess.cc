#include "core/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/fd.h"

extern char** environ;

namespace lockstep {
namespace {

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

int PidfdSendSignal(int pidfd, int sig) {
  return static_cast<int>(syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

std::string ErrnoText(int err) { return absl::StrCat(std::strerror(err), " (errno ", err, ")"); }

// What the child reports through the close-on-exec pipe when it cannot
// reach exec: which step failed and its errno.
struct ChildFailure {
  int step;  // kStepExec, kStepInheritFd or kStepAffinity.
  int err;
};
constexpr int kStepExec = 1;
constexpr int kStepInheritFd = 2;
constexpr int kStepAffinity = 3;
constexpr int kStepStdio = 4;
constexpr int kStepParentDeath = 5;

// Everything the child touches is prepared before fork: between fork and
// exec only async-signal-safe calls are allowed (other threads may hold the
// malloc lock at the moment of the fork).
struct ChildPlan {
  std::vector<char*> argv;
  std::vector<char*> envp;
  const std::vector<int>* inherit_fds;
  bool new_process_group;
  unsigned alarm_seconds;
  bool set_affinity;
  cpu_set_t cpus;
  int stdout_fd;
  int stderr_fd;
  int parent_death_signal;
  pid_t parent;  // getpid() before fork, for the parent-death race check.
};

[[noreturn]] void ExecChild(const ChildPlan& plan, int error_fd) {
  ChildFailure failure{kStepExec, 0};
  if (plan.new_process_group) setpgid(0, 0);
  if (plan.parent_death_signal > 0) {
    if (prctl(PR_SET_PDEATHSIG, plan.parent_death_signal) != 0) {
      failure = {kStepParentDeath, errno};
      (void)!write(error_fd, &failure, sizeof(failure));
      _exit(127);
    }
    // The parent may have died between fork and prctl: then nobody would
    // ever send the signal.
    if (getppid() != plan.parent) raise(plan.parent_death_signal);
  }
  const int stdio_from[2] = {plan.stdout_fd, plan.stderr_fd};
  for (int i = 0; i < 2; ++i) {
    if (stdio_from[i] >= 0 && dup2(stdio_from[i], i + 1) < 0) {
      failure = {kStepStdio, errno};
      (void)!write(error_fd, &failure, sizeof(failure));
      _exit(127);
    }
  }
  for (int fd : *plan.inherit_fds) {
    const int flags = fcntl(fd, F_GETFD);
    if (flags < 0 || fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC) < 0) {
      failure = {kStepInheritFd, errno};
      (void)!write(error_fd, &failure, sizeof(failure));
      _exit(127);
    }
  }
  // A fresh program expects a clean signal state: the mask and SIGPIPE's
  // disposition survive exec, and servers often ignore SIGPIPE (as Python's
  // subprocess restores it).
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction default_action;
  std::memset(&default_action, 0, sizeof(default_action));
  default_action.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &default_action, nullptr);
  if (plan.set_affinity && sched_setaffinity(0, sizeof(plan.cpus), &plan.cpus) != 0) {
    failure = {kStepAffinity, errno};
    (void)!write(error_fd, &failure, sizeof(failure));
    _exit(127);
  }
  if (plan.alarm_seconds > 0) alarm(plan.alarm_seconds);
  execve(plan.argv[0], plan.argv.data(), plan.envp.data());
  failure.err = errno;
  (void)!write(error_fd, &failure, sizeof(failure));
  _exit(127);
}

// "NAME=value" for this process's environment with `overrides` applied
// (later overrides of the same name win).
absl::StatusOr<std::vector<std::string>> ChildEnvironment(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  for (const auto& [name, value] : overrides) {
    if (name.empty() || name.find('=') != std::string::npos || name.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("Subprocess: '", name, "' is not an environment variable name (empty, or has '=')"));
    }
  }
  auto overridden = [&](absl::string_view name) {
    return std::any_of(overrides.begin(), overrides.end(), [&](const auto& o) { return o.first == name; });
  };
  std::vector<std::string> result;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const absl::string_view text(*entry);
    if (!overridden(text.substr(0, text.find('=')))) result.emplace_back(text);
  }
  for (size_t i = 0; i < overrides.size(); ++i) {
    const auto& [name, value] = overrides[i];
    const bool replaced_later = std::any_of(overrides.begin() + static_cast<std::ptrdiff_t>(i) + 1, overrides.end(),
                                            [&](const auto& o) { return o.first == name; });
    if (!replaced_later) result.push_back(absl::StrCat(name, "=", value));
  }
  return result;
}

absl::Status ExecError(const std::string& program, const ChildFailure& failure) {
  if (failure.step == kStepAffinity) {
    return absl::InvalidArgumentError(absl::StrCat("cannot run '", program,
                                                   "' on the CPUs asked for: ", ErrnoText(failure.err),
                                                   "; name CPUs this process may use (see taskset -p $$)"));
  }
  if (failure.step == kStepStdio || failure.step == kStepParentDeath) {
    return absl::InternalError(
        absl::StrCat("cannot run '", program,
                     "': ", failure.step == kStepStdio ? "redirecting stdout/stderr (dup2)" : "prctl(PR_SET_PDEATHSIG)",
                     " failed: ", ErrnoText(failure.err)));
  }
  if (failure.step == kStepInheritFd) {
    return absl::InternalError(absl::StrCat(
        "cannot run '", program, "': keeping an inherited descriptor open failed: ", ErrnoText(failure.err)));
  }
  const std::string message = absl::StrCat("cannot run '", program, "': ", ErrnoText(failure.err),
                                           "; argv[0] must be the path of an executable (PATH is not searched)");
  switch (failure.err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    default:
      return absl::FailedPreconditionError(message);
  }
}

// Milliseconds for poll() until `deadline`: -1 without one, rounded up so
// that a wake-up is never early, capped (the callers loop).
int PollTimeout(Subprocess::Deadline deadline) {
  if (deadline == Subprocess::Deadline::max()) return -1;
  const auto left = deadline - Subprocess::Clock::now();
  if (left <= Subprocess::Clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<decltype(ms)>(ms, 3600 * 1000));
}

}  // namespace

ExitStatus ExitStatus::FromWaitStatus(int wstatus) {
  if (WIFSIGNALED(wstatus)) return Signaled(WTERMSIG(wstatus));
  if (WIFEXITED(wstatus)) return Exited(WEXITSTATUS(wstatus));
  return Exited(-1);  // Stopped/continued: never reported without WUNTRACED.
}

std::string ExitStatus::ToString() const {
  if (!signaled_) return absl::StrCat("exited with code ", value_);
  const char* name = strsignal(value_);
  return absl::StrCat("killed by signal ", value_, name != nullptr ? absl::StrCat(" (", name, ")") : "");
}

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

absl::StatusOr<Subprocess> Subprocess::Spawn(const SubprocessOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return absl::InvalidArgumentError("Subprocess::Spawn: argv is empty; argv[0] must be the program's path");
  }
  absl::StatusOr<std::vector<std::string>> env = ChildEnvironment(options.env);
  if (!env.ok()) return env.status();
  std::vector<std::string> argv = options.argv;  // Mutable copies for execve's char* const[].
  ChildPlan plan;
  for (std::string& arg : argv) plan.argv.push_back(arg.data());
  plan.argv.push_back(nullptr);
  for (std::string& entry : *env) plan.envp.push_back(entry.data());
  plan.envp.push_back(nullptr);
  plan.inherit_fds = &options.inherit_fds;
  plan.new_process_group = options.new_process_group;
  plan.alarm_seconds = options.alarm_seconds;
  plan.set_affinity = !options.cpus.empty();
  plan.stdout_fd = options.stdout_fd;
  plan.stderr_fd = options.stderr_fd;
  plan.parent_death_signal = options.parent_death_signal;
  plan.parent = getpid();
  CPU_ZERO(&plan.cpus);
  for (int cpu : options.cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      return absl::InvalidArgumentError(absl::StrCat("Subprocess::Spawn: CPU ", cpu, " is not a CPU number"));
    }
    CPU_SET(cpu, &plan.cpus);
  }

  int error_pipe[2];
  if (pipe2(error_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("Subprocess::Spawn: pipe2: ", ErrnoText(errno)));
  }
  Fd error_read(error_pipe[0]);
  Fd error_write(error_pipe[1]);
  const pid_t pid = fork();
  if (pid < 0) {
    return absl::InternalError(absl::StrCat("cannot run '", options.argv[0], "': fork: ", ErrnoText(errno)));
  }
  if (pid == 0) ExecChild(plan, error_write.get());

  Subprocess child;
  child.pid_ = pid;
  child.program_ = options.argv[0];
  child.group_ = options.new_process_group;
  // Also in the parent, so that the group exists before Spawn returns
  // (fails harmlessly with EACCES once the child has exec'd).
  if (options.new_process_group) setpgid(pid, pid);
  error_write.Close();
  ChildFailure failure{0, 0};
  ssize_t n;
  do {
    n = read(error_read.get(), &failure, sizeof(failure));
  } while (n < 0 && errno == EINTR);
  child.pidfd_ = PidfdOpen(pid);
  if (n != 0) {
    // The child reported a failure and exits; `child`'s destructor reaps it.
    if (n != static_cast<ssize_t>(sizeof(failure))) failure = {kStepExec, n < 0 ? errno : EIO};
    return ExecError(options.argv[0], failure);
  }
  if (child.pidfd_ < 0) {
    return absl::InternalError(absl::StrCat("cannot watch '", options.argv[0], "' (pid ", pid,
                                            "): pidfd_open: ", ErrnoText(errno), "; Linux >= 5.3 is needed"));
  }
  return child;
}

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      pidfd_(std::exchange(other.pidfd_, -1)),
      group_(other.group_),
      reaped_(other.reaped_),
      status_(other.status_),
      program_(std::move(other.program_)) {}

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    Release();
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::exchange(other.pidfd_, -1);
    group_ = other.group_;
    reaped_ = other.reaped_;
    status_ = other.status_;
    program_ = std::move(other.program_);
  }
  return *this;
}

Subprocess::~Subprocess() { Release(); }

void Subprocess::Release() {
  if (pid_ >= 0 && !reaped_) {
    (void)Kill();
    int wstatus = 0;
    while (waitpid(pid_, &wstatus, 0) < 0 && errno == EINTR) {
    }
  }
  if (pidfd_ >= 0) ::close(pidfd_);
  pid_ = -1;
  pidfd_ = -1;
  reaped_ = false;
}

absl::StatusOr<bool> Subprocess::TryReap() {
  if (reaped_) return true;
  int wstatus = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &wstatus, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return false;
  if (r < 0) {
    return absl::InternalError(absl::StrCat("waiting for '", program_, "' (pid ", pid_, "): ", ErrnoText(errno),
                                            "; was it reaped elsewhere (waitpid(-1) or SIGCHLD ignored)?"));
  }
  reaped_ = true;
  status_ = ExitStatus::FromWaitStatus(wstatus);
  return true;
}

absl::StatusOr<ExitStatus> Subprocess::Wait(Deadline deadline) {
  if (pid_ < 0) return absl::FailedPreconditionError("Subprocess::Wait on an empty (moved-from) Subprocess");
  for (;;) {
    absl::StatusOr<bool> done = TryReap();
    if (!done.ok()) return done.status();
    if (*done) return status_;
    const int timeout = PollTimeout(deadline);
    if (timeout == 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("'", program_, "' (pid ", pid_, ") is still running at the deadline"));
    }
    pollfd p{pidfd_, POLLIN, 0};
    if (poll(&p, 1, timeout) < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("waiting for '", program_, "': poll: ", ErrnoText(errno)));
    }
  }
}

absl::Status Subprocess::Signal(int sig) {
  if (pid_ < 0) return absl::FailedPreconditionError("Subprocess::Signal on an empty (moved-from) Subprocess");
  if (reaped_) return absl::OkStatus();
  // Without a pidfd (Spawn failed to open one) the pid is still safe to
  // use: it stays ours until we reap it.
  const int rc = pidfd_ >= 0 ? PidfdSendSignal(pidfd_, sig) : ::kill(pid_, sig);
  if (rc != 0 && errno != ESRCH) {
    return absl::InternalError(
        absl::StrCat("signal ", sig, " to '", program_, "' (pid ", pid_, "): ", ErrnoText(errno)));
  }
  return absl::OkStatus();
}

absl::Status Subprocess::SignalGroup(int sig) {
  if (pid_ < 0) return absl::FailedPreconditionError("Subprocess::SignalGroup on an empty (moved-from) Subprocess");
  if (!group_) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", program_, "' has no process group of its own; spawn it with new_process_group = true"));
  }
  // The group outlives a reaped leader while descendants remain; its id
  // cannot be reused until all of them are gone.
  if (killpg(pid_, sig) != 0 && errno != ESRCH) {
    return absl::InternalError(
        absl::StrCat("signal ", sig, " to the group of '", program_, "' (", pid_, "): ", ErrnoText(errno)));
  }
  return absl::OkStatus();
}

absl::Status Subprocess::Kill() {
  if (group_ && !reaped_) return SignalGroup(SIGKILL);
  return Signal(SIGKILL);
}

absl::StatusOr<WaitAnyResult> WaitAny(absl::Span<Subprocess> children, Subprocess::Deadline deadline) {
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    for (size_t i = 0; i < children.size(); ++i) {
      Subprocess& child = children[i];
      if (child.pid_ < 0 || child.reaped_) continue;
      absl::StatusOr<bool> done = child.TryReap();
      if (!done.ok()) return done.status();
      if (*done) return WaitAnyResult{i, child.status_};
      fds.push_back(pollfd{child.pidfd_, POLLIN, 0});
    }
    if (fds.empty()) return absl::FailedPreconditionError("WaitAny: every child has already been waited for");
    const int timeout = PollTimeout(deadline);
    if (timeout == 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("WaitAny: none of ", fds.size(), " running children ended before the deadline"));
    }
    if (poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("WaitAny: poll: ", ErrnoText(errno)));
    }
  }
}

}  // namespace lockstep
