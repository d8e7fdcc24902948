// delay_link: joins network namespaces through a user-space switch that
// delays every packet (this kernel has no netem). See kDelayLinkUsage in
// delay_link_flags.cc for the flags, forwarder.h for the loop.
//
//   delay_link --netns=lab-a,lab-b --delay_us=200 --ready_file=/tmp/x/ready
//       --stats_json=/tmp/x/stats.json &     (one command line)
//   (wait for /tmp/x/ready) ... ip netns exec lab-a ping 10.77.0.2 ...
//   kill -TERM $!    # prints the stats, writes stats.json
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/atomic_file.h"
#include "core/fd.h"
#include "tools/scale_lab/delay_link_flags.h"
#include "tools/scale_lab/forwarder.h"
#include "tools/scale_lab/netns_tun.h"
#include "tools/scale_lab/selftest.h"

namespace lockstep {
namespace scale_lab {
namespace {

// Real-time scheduling and locked memory: a page fault or a time slice
// given to another process shows up as lateness. Neither is required.
void TuneForLatency(int priority) {
  if (::mlockall(MCL_CURRENT | MCL_FUTURE) != 0) {
    std::fprintf(stderr, "delay_link: warning: mlockall failed: %s; going on (page faults may add lateness)\n",
                 std::strerror(errno));
  }
  if (priority <= 0) return;
  sched_param param;
  std::memset(&param, 0, sizeof(param));
  param.sched_priority = priority;
  // SCHED_RESET_ON_FORK: threads and children (the selftest's) start at
  // normal priority.
  if (::sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &param) != 0) {
    std::fprintf(stderr,
                 "delay_link: warning: sched_setscheduler(SCHED_FIFO, %d) failed: %s; going on at normal "
                 "priority (lateness will be higher; run as root or --realtime_priority=0 to silence)\n",
                 priority, std::strerror(errno));
  }
}

int Main(int argc, char** argv) {
  absl::StatusOr<DelayLinkFlags> parsed = ParseDelayLinkFlags(std::vector<std::string>(argv + 1, argv + argc));
  if (!parsed.ok()) {
    std::fprintf(stderr, "delay_link: %s\n", std::string(parsed.status().message()).c_str());
    return 2;
  }
  const DelayLinkFlags& flags = *parsed;
  if (flags.help) {
    std::fputs(kDelayLinkUsage, stdout);
    return 0;
  }

  // SIGTERM and SIGINT end the loop through a signalfd, also when they come
  // during setup (they stay pending until the loop reads them).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  if (::sigprocmask(SIG_BLOCK, &stop_signals, nullptr) != 0) {
    std::fprintf(stderr, "delay_link: sigprocmask failed: %s\n", std::strerror(errno));
    return 1;
  }
  ::signal(SIGPIPE, SIG_IGN);
  Fd signal_fd(::signalfd(-1, &stop_signals, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signal_fd.valid()) {
    std::fprintf(stderr, "delay_link: signalfd failed: %s\n", std::strerror(errno));
    return 1;
  }

  std::vector<Fd> tuns;
  for (size_t i = 0; i < flags.netns.size(); ++i) {
    TunOptions tun;
    tun.netns = flags.netns[i];
    tun.ifname = flags.ifname;
    tun.address = flags.subnet + static_cast<uint32_t>(i) + 1;
    tun.prefix_len = 16;
    tun.mtu = flags.mtu;
    absl::StatusOr<Fd> fd = OpenTunInNetns(tun);
    if (!fd.ok()) {
      // The devices made so far go away with their descriptors.
      std::fprintf(stderr, "delay_link: host %zu: %s\n", i, std::string(fd.status().message()).c_str());
      return 1;
    }
    tuns.push_back(*std::move(fd));
  }

  ForwarderOptions options;
  options.delay_ns = flags.delay_ns;
  options.rate_bps = flags.rate_bps;
  options.mtu = flags.mtu;
  options.subnet = flags.subnet;
  options.buffers = flags.buffers;
  options.spin_ns = flags.spin_ns;
  options.busy_poll = flags.busy_poll;
  options.stats_every_s = flags.stats_every_s;
  Forwarder forwarder(std::move(tuns), flags.netns, options);
  TuneForLatency(flags.realtime_priority);

  if (!flags.ready_file.empty()) {
    absl::Status written = WriteFileAtomically(flags.ready_file, "ready\n");
    if (!written.ok()) {
      std::fprintf(stderr, "delay_link: writing --ready_file: %s\n", std::string(written.message()).c_str());
      return 1;
    }
  }
  std::fprintf(stdout, "ready\n");
  std::fflush(stdout);

  absl::Status status;
  std::string extra;
  if (flags.selftest) {
    absl::StatusOr<SelftestResult> result =
        RunSelftest(forwarder, flags.netns, flags.subnet + 1, flags.subnet + 2, flags.selftest_s, {signal_fd.get()});
    if (result.ok()) {
      extra = SelftestJsonFields(*result);
      std::fprintf(stderr, "delay_link: selftest: %lld bytes in %.3f s: %.3f Gbit/s%s%s\n",
                   static_cast<long long>(result->bytes), result->seconds, result->gbps,
                   result->completed ? "" : "; NOT COMPLETED: ", result->error.c_str());
      if (!result->completed) status = absl::InternalError("selftest: " + result->error);
    } else {
      status = result.status();
    }
  } else {
    status = forwarder.Run({signal_fd.get()});
  }

  const ForwarderStats& stats = forwarder.stats();
  std::string json = StatsJson(stats, options, static_cast<int>(flags.netns.size()), extra);
  std::fprintf(stderr, "%s\n", StatsLine(stats, options).c_str());
  std::fprintf(stdout, "%s\n", json.c_str());
  std::fflush(stdout);
  int rc = 0;
  if (!status.ok()) {
    std::fprintf(stderr, "delay_link: %s\n", std::string(status.message()).c_str());
    rc = 1;
  }
  if (!flags.stats_json.empty()) {
    absl::Status written = WriteFileAtomically(flags.stats_json, json + "\n");
    if (!written.ok()) {
      std::fprintf(stderr, "delay_link: writing --stats_json: %s\n", std::string(written.message()).c_str());
      rc = 1;
    }
  }
  return rc;
}

}  // namespace
}  // namespace scale_lab
}  // namespace lockstep

int main(int argc, char** argv) { return lockstep::scale_lab::Main(argc, argv); }
