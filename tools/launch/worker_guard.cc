#include "tools/launch/worker_guard.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace lockstep {
namespace launch {
namespace {

// Signals the agent forwards to a worker's group: meant for the worker.
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};

// The agent is gone: end the whole group, the guard included. kill() is
// async-signal-safe.
void KillGroup(int) { ::kill(0, SIGKILL); }

}  // namespace

int WorkerGuardDeathSignal() { return SIGRTMIN + 3; }

bool IsWorkerGuard(const char* arg) {
  return arg != nullptr && std::strncmp(arg, kWorkerGuardFlag, sizeof(kWorkerGuardFlag) - 1) == 0;
}

std::vector<std::string> GuardedArgv(const std::vector<std::string>& worker_argv) {
  std::vector<std::string> argv = {"/proc/self/exe", absl::StrCat(kWorkerGuardFlag, ::getpid())};
  argv.insert(argv.end(), worker_argv.begin(), worker_argv.end());
  return argv;
}

int RunWorkerGuard(int argc, char** argv) {
  const int death = WorkerGuardDeathSignal();
  struct sigaction on_death = {};
  on_death.sa_handler = KillGroup;
  sigemptyset(&on_death.sa_mask);
  ::sigaction(death, &on_death, nullptr);
  // The agent set the death signal before exec (it survives exec). Had the
  // agent died before the handler was in place, the signal's default action
  // would have ended the guard before any worker started; had it died just
  // before the prctl, nobody would send the signal: check.
  ::prctl(PR_SET_PDEATHSIG, death);
  const char* pid_text = argv[1] + sizeof(kWorkerGuardFlag) - 1;
  int agent = 0;
  if (argc < 3 || !absl::SimpleAtoi(pid_text, &agent) || agent <= 0) {
    std::fprintf(stderr,
                 "lockstep-run: %s needs the agent's pid and a program (got '%s'%s); it is started by "
                 "lockstep-run's agent, not by hand\n",
                 kWorkerGuardFlag, pid_text, argc < 3 ? " and no program" : "");
    return 127;
  }
  // Killing "the group" is only right for the group the agent made for
  // this worker, which the guard leads; anywhere else it would hit the
  // caller's own processes.
  if (::getpgrp() != ::getpid()) {
    std::fprintf(stderr,
                 "lockstep-run: %s%d must lead its own process group (the agent starts it so); refusing to "
                 "run %s\n",
                 kWorkerGuardFlag, agent, argv[2]);
    return 127;
  }
  if (::getppid() != static_cast<pid_t>(agent)) KillGroup(0);  // The agent is gone already.
  for (int sig : kForwarded) ::signal(sig, SIG_IGN);

  const pid_t guard = ::getpid();
  const pid_t worker = ::fork();
  if (worker < 0) {
    std::fprintf(stderr, "lockstep-run: the worker guard could not fork: %s\n", std::strerror(errno));
    return 127;
  }
  if (worker == 0) {
    for (int sig : kForwarded) ::signal(sig, SIG_DFL);
    ::signal(death, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != guard) ::_exit(128 + SIGKILL);
    ::execvp(argv[2], argv + 2);
    std::fprintf(stderr, "lockstep-run: cannot execute %s: %s\n", argv[2], std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(worker, &status, 0) < 0) {
    if (errno != EINTR) {
      std::fprintf(stderr, "lockstep-run: the worker guard lost its worker: %s\n", std::strerror(errno));
      return 127;
    }
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  const int sig = WTERMSIG(status);
  // End the same way, so the agent sees the worker's signal; the worker
  // wrote its own core file if it made one.
  const rlimit no_core = {0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  ::signal(sig, SIG_DFL);
  sigset_t just;
  sigemptyset(&just);
  sigaddset(&just, sig);
  ::sigprocmask(SIG_UNBLOCK, &just, nullptr);
  ::raise(sig);
  return 128 + sig;
}

}  // namespace launch
}  // namespace lockstep
