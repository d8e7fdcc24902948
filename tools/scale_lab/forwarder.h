// Forwarder: the delay_link event loop. One thread moves IPv4 packets
// between H hosts' TUN devices, each leaving no earlier than its deadline
// (delay_queue.h: arrival + delay, plus serialization at a rate), and
// measures how late each one left.
//
//   ForwarderOptions options;
//   options.delay_ns = 200'000;
//   Forwarder forwarder(std::move(tuns), netns_names, options);
//   absl::Status status = forwarder.Run({signal_fd});   // until a stop fd is readable
//   std::cout << StatsJson(forwarder.stats(), options, netns_names.size());
//
// The loop: epoll (level-triggered) over the TUN descriptors (nonblocking),
// an absolute CLOCK_MONOTONIC timerfd armed for the earliest deadline less
// the spin window, an optional periodic stats timerfd, and the stop
// descriptors. A packet read from host i is addressed by its IPv4
// destination: subnet + j + 1 is host j (10.77.0.1 is host 0); anything else
// is dropped and counted. Due packets are written to the destination's TUN.
// The timer fires `spin_ns` before a deadline and the loop then polls (epoll
// with no timeout: it keeps reading arrivals) until the deadline, because a
// sleeping thread wakes late: on the 2-core VM this was written on, a
// SCHED_FIFO thread's timer wakeups are ~50 us late at the median and ms
// late at p99 (stats: timer_wake_late_*). busy_poll never sleeps.
//
// Lateness of a packet = the monotonic time just before its write() less its
// deadline; it is never negative (the loop does not write early). Arrival is
// when the loop read the packet: time it waited unread in the source TUN's
// queue (while the loop was busy) is not seen, so near saturation
// (cpu_s close to elapsed_s) the true extra delay exceeds the lateness.
// Reading stops for due packets: a long run of reads does not hold them.
#ifndef LOCKSTEP_TOOLS_SCALE_LAB_FORWARDER_H_
#define LOCKSTEP_TOOLS_SCALE_LAB_FORWARDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/fd.h"
#include "tools/scale_lab/delay_queue.h"
#include "tools/scale_lab/lateness_histogram.h"

namespace lockstep {
namespace scale_lab {

struct ForwarderOptions {
  int64_t delay_ns = 0;
  int64_t rate_bps = 0;      // each source NIC's rate; 0: no serialization
  int mtu = 65000;           // the largest packet (the buffers' size)
  uint32_t subnet = 0;       // a.b.0.0 in host byte order; host j is subnet + j + 1
  int buffers = 1024;        // packets in flight, all links together
  int64_t spin_ns = 20'000;  // poll from this long before a deadline
  bool busy_poll = false;    // poll always, never sleep (a core at 100%)
  double stats_every_s = 0;  // > 0: a line of stats to stderr this often
};

struct ForwarderStats {
  int64_t packets = 0;  // forwarded (written to the destination's TUN)
  int64_t bytes = 0;
  int64_t dropped_not_ipv4 = 0;
  int64_t dropped_unknown_dst = 0;  // IPv4 but not one of the hosts' addresses
  int64_t dropped_no_buffer = 0;    // every buffer in flight
  int64_t dropped_write_error = 0;  // write() to the destination's TUN failed
  int64_t max_queued = 0;
  LatenessHistogram lateness;
  // How long each write() to a TUN took: it runs the receiving host's
  // network stack in this thread (TCP receive, the ACK it sends, and what
  // that ACK releases), so packets due together leave that far apart.
  LatenessHistogram write_duration;
  int64_t elapsed_ns = 0;  // Run()'s wall time
  int64_t cpu_ns = 0;      // the loop thread's CPU time (user + system) in Run()
  int64_t spin_ns = 0;     // of which polling that found nothing to do
  // How late the deadline timer woke the loop after its target (when it
  // slept): what the spin window has to cover.
  LatenessHistogram timer_wake_late;

  int64_t dropped() const { return dropped_not_ipv4 + dropped_unknown_dst + dropped_no_buffer + dropped_write_error; }
};

class Forwarder {
 public:
  // tuns[i] is host i's TUN (nonblocking); names[i] its namespace, for messages.
  Forwarder(std::vector<Fd> tuns, std::vector<std::string> names, const ForwarderOptions& options);

  // Forwards until one of `stop_fds` is readable (it is not read). Errors:
  // a failed epoll/timerfd call or a TUN that cannot be read (its namespace
  // gone); the stats so far stay valid.
  absl::Status Run(const std::vector<int>& stop_fds);

  const ForwarderStats& stats() const { return stats_; }

 private:
  absl::Status ReadFrom(int host);
  void DispatchDue();
  absl::Status ArmTimer();
  void PrintStats(int64_t now_ns);
  // The destination host of an IPv4 packet, or -1 (counted as dropped).
  int HostOf(const uint8_t* packet, int bytes);

  std::vector<Fd> tuns_;
  std::vector<std::string> names_;
  ForwarderOptions options_;
  DelayQueue queue_;
  std::vector<uint8_t> scratch_;  // reads that find no free buffer land here
  Fd timer_;
  int64_t armed_ns_ = 0;      // the timer's target, 0 when disarmed
  int64_t next_deadline_ns_;  // the earliest queued deadline, INT64_MAX when none
  ForwarderStats stats_;
  int64_t start_ns_ = 0;
  int64_t last_print_ns_ = 0;
  int64_t last_print_bytes_ = 0;
};

// The lab's rule: a run's links kept their delay when the p99 lateness is
// within 10 % of it. With no delay (D = 0, links at the forwarder's own
// speed) there is nothing to keep, and every run is valid.
bool KeepsItsDelay(int64_t p99_lateness_ns, int64_t delay_ns);

// The stats as one JSON object (one line), with the options that shaped
// them, the lateness quantiles in µs, the throughput figures (see
// delay_link_main.cc's --help) and "valid": KeepsItsDelay. `extra_fields` ("\"k\": v, ...") go at the end.
std::string StatsJson(const ForwarderStats& stats, const ForwarderOptions& options, int hosts,
                      const std::string& extra_fields = "");

// A one-line human summary of the same.
std::string StatsLine(const ForwarderStats& stats, const ForwarderOptions& options);

int64_t MonotonicNowNs();

}  // namespace scale_lab
}  // namespace lockstep

#endif  // LOCKSTEP_TOOLS_SCALE_LAB_FORWARDER_H_
