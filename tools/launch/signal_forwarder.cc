#include "tools/launch/signal_forwarder.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace lockstep {
namespace launch {
namespace {

// SIGUSR2 only wakes the thread to stop.
sigset_t ForwardedSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGUSR2);
  return set;
}

}  // namespace

SignalForwarder::SignalForwarder() {
  const sigset_t set = ForwardedSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // Threads started later inherit the mask.
  thread_ = std::thread([this] { Run(); });
}

SignalForwarder::~SignalForwarder() {
  stopping_.store(true);
  pthread_kill(thread_.native_handle(), SIGUSR2);
  thread_.join();
}

void SignalForwarder::SetTargets(std::vector<pid_t> process_groups) {
  std::lock_guard<std::mutex> lock(mu_);
  targets_ = std::move(process_groups);
}

void SignalForwarder::Run() {
  const sigset_t set = ForwardedSignals();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (stopping_.load()) return;
    if (sig == SIGUSR2) continue;
    int expected = 0;
    received_.compare_exchange_strong(expected, sig);
    std::lock_guard<std::mutex> lock(mu_);
    if (targets_.empty()) {
      const std::string message = std::string("[lockstep-run] received ") + strsignal(sig) + "; exiting\n";
      (void)!::write(2, message.data(), message.size());
      _exit(128 + sig);
    }
    for (pid_t group : targets_) ::killpg(group, sig);
  }
}

}  // namespace launch
}  // namespace lockstep
