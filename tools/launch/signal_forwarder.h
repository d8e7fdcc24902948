// SignalForwarder: passes SIGINT, SIGTERM and SIGHUP sent to the agent on to
// its workers' process groups, as torchrun does, and tells the agent's loop.
//
//   SignalForwarder forwarder;             // first thing in main(), before any thread
//   forwarder.SetTargets(workers->RunningGroups());
//   ... if (int sig = forwarder.received()) { stop, publish, exit 128 + sig } ...
//
// The signals are blocked in every thread and taken by one thread with
// sigwait(), so no handler runs at an arbitrary point. With no targets (the
// agent is not running workers, e.g. waiting at the rendezvous) the signal
// ends the agent at once, as the default action would.
#ifndef LOCKSTEP_TOOLS_LAUNCH_SIGNAL_FORWARDER_H_
#define LOCKSTEP_TOOLS_LAUNCH_SIGNAL_FORWARDER_H_

#include <sys/types.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace lockstep {
namespace launch {

class SignalForwarder {
 public:
  SignalForwarder();
  ~SignalForwarder();
  SignalForwarder(const SignalForwarder&) = delete;
  SignalForwarder& operator=(const SignalForwarder&) = delete;

  void SetTargets(std::vector<pid_t> process_groups);
  // The first signal received, or 0.
  int received() const { return received_.load(); }

 private:
  void Run();
  std::mutex mu_;
  std::vector<pid_t> targets_;  // Guarded by mu_.
  std::atomic<int> received_{0};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace launch
}  // namespace lockstep

#endif  // LOCKSTEP_TOOLS_LAUNCH_SIGNAL_FORWARDER_H_
