#include "tools/scale_lab/forwarder.h"

#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status.h"

namespace lockstep {
namespace scale_lab {
namespace {

// epoll tags above the host indices.
constexpr uint64_t kDeadlineTimerTag = uint64_t{1} << 32;
constexpr uint64_t kStatsTimerTag = kDeadlineTimerTag + 1;
constexpr uint64_t kStopTag = kDeadlineTimerTag + 2;

// Packets read from one TUN before the loop looks at deadlines again.
constexpr int kReadBudget = 32;

timespec ToTimespec(int64_t ns) {
  timespec ts;
  ts.tv_sec = ns / 1'000'000'000;
  ts.tv_nsec = ns % 1'000'000'000;
  return ts;
}

int64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

std::string ErrnoText(int err) { return absl::StrCat(std::strerror(err), " (errno ", err, ")"); }

double Us(int64_t ns) { return static_cast<double>(ns) / 1e3; }

// Forwarded bits per CPU-second of forwarding work (the loop thread's CPU
// time less its busy-waiting): the rate it could sustain if it had a core
// to itself and nothing else changed. Writes to a TUN run the receiving
// host's network stack in this thread, so that cost is included.
double CeilingPerSecond(double amount, const ForwarderStats& stats) {
  int64_t work_ns = stats.cpu_ns - stats.spin_ns;
  return work_ns > 0 ? amount * 1e9 / static_cast<double>(work_ns) : 0.0;
}

}  // namespace

int64_t MonotonicNowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

namespace {
DelayQueue::Options QueueOptions(int hosts, const ForwarderOptions& options) {
  DelayQueue::Options q;
  q.hosts = hosts;
  q.delay_ns = options.delay_ns;
  q.rate_bps = options.rate_bps;
  q.buffers = options.buffers;
  q.buffer_bytes = options.mtu;
  return q;
}
}  // namespace

Forwarder::Forwarder(std::vector<Fd> tuns, std::vector<std::string> names, const ForwarderOptions& options)
    : tuns_(std::move(tuns)),
      names_(std::move(names)),
      options_(options),
      queue_(QueueOptions(static_cast<int>(tuns_.size()), options)),
      scratch_(options.mtu),
      next_deadline_ns_(INT64_MAX) {}

int Forwarder::HostOf(const uint8_t* packet, int bytes) {
  if (bytes < 20 || (packet[0] >> 4) != 4) {
    ++stats_.dropped_not_ipv4;
    return -1;
  }
  uint32_t dst =
      (uint32_t{packet[16]} << 24) | (uint32_t{packet[17]} << 16) | (uint32_t{packet[18]} << 8) | uint32_t{packet[19]};
  uint32_t host = dst - options_.subnet - 1;  // wraps to a huge value below the subnet
  if (host >= tuns_.size()) {
    ++stats_.dropped_unknown_dst;
    return -1;
  }
  return static_cast<int>(host);
}

absl::Status Forwarder::ReadFrom(int src) {
  int fd = tuns_[src].get();
  for (int k = 0; k < kReadBudget; ++k) {
    int slot = queue_.Acquire();
    uint8_t* buffer = slot >= 0 ? queue_.data(slot) : scratch_.data();
    ssize_t n = ::read(fd, buffer, options_.mtu);
    if (n < 0) {
      int err = errno;
      if (slot >= 0) queue_.Release(slot);
      if (err == EAGAIN || err == EINTR) return absl::OkStatus();
      return absl::InternalError(absl::StrCat("read() from the TUN of network namespace ", names_[src],
                                              " failed: ", ErrnoText(err), " (was the namespace or device removed?)"));
    }
    int64_t arrival_ns = MonotonicNowNs();
    if (slot < 0) {
      ++stats_.dropped_no_buffer;
      continue;
    }
    int dst = HostOf(buffer, static_cast<int>(n));
    if (dst < 0) {
      queue_.Release(slot);
      continue;
    }
    int64_t deadline_ns = queue_.Push(slot, src, dst, static_cast<int>(n), arrival_ns);
    next_deadline_ns_ = std::min(next_deadline_ns_, deadline_ns);
    stats_.max_queued = std::max<int64_t>(stats_.max_queued, queue_.queued());
    if (arrival_ns >= next_deadline_ns_) DispatchDue();
  }
  return absl::OkStatus();
}

void Forwarder::DispatchDue() {
  for (;;) {
    int slot = queue_.Earliest();
    if (slot < 0) {
      next_deadline_ns_ = INT64_MAX;
      return;
    }
    int64_t deadline_ns = queue_.deadline(slot);
    next_deadline_ns_ = deadline_ns;
    int64_t now_ns = MonotonicNowNs();
    if (deadline_ns > now_ns) return;
    int bytes = queue_.bytes(slot);
    ssize_t n = ::write(tuns_[queue_.dst(slot)].get(), queue_.data(slot), bytes);
    stats_.write_duration.Record(MonotonicNowNs() - now_ns);
    if (n == bytes) {
      ++stats_.packets;
      stats_.bytes += bytes;
      stats_.lateness.Record(now_ns - deadline_ns);
    } else {
      ++stats_.dropped_write_error;
    }
    queue_.PopEarliest();
  }
}

absl::Status Forwarder::ArmTimer() {
  int slot = queue_.Earliest();
  int64_t target_ns = slot < 0 ? 0 : std::max<int64_t>(1, queue_.deadline(slot) - options_.spin_ns);
  if (target_ns == armed_ns_) return absl::OkStatus();
  itimerspec spec;
  std::memset(&spec, 0, sizeof(spec));
  spec.it_value = ToTimespec(target_ns);  // 0: disarm
  if (::timerfd_settime(timer_.get(), TFD_TIMER_ABSTIME, &spec, nullptr) != 0) {
    return absl::InternalError(absl::StrCat("timerfd_settime failed: ", ErrnoText(errno)));
  }
  armed_ns_ = target_ns;
  return absl::OkStatus();
}

void Forwarder::PrintStats(int64_t now_ns) {
  double interval_s = static_cast<double>(now_ns - last_print_ns_) / 1e9;
  double gbps = interval_s > 0 ? (stats_.bytes - last_print_bytes_) * 8 / interval_s / 1e9 : 0;
  std::fprintf(stderr,
               "delay_link: t=%.1fs packets=%lld bytes=%lld (%.3f Gbit/s) dropped=%lld queued=%d "
               "lateness p50=%.1fus p99=%.1fus max=%.1fus\n",
               static_cast<double>(now_ns - start_ns_) / 1e9, static_cast<long long>(stats_.packets),
               static_cast<long long>(stats_.bytes), gbps, static_cast<long long>(stats_.dropped()), queue_.queued(),
               Us(stats_.lateness.Quantile(0.5)), Us(stats_.lateness.Quantile(0.99)), Us(stats_.lateness.max_ns()));
  last_print_ns_ = now_ns;
  last_print_bytes_ = stats_.bytes;
}

absl::Status Forwarder::Run(const std::vector<int>& stop_fds) {
  Fd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll.valid()) return absl::InternalError(absl::StrCat("epoll_create1 failed: ", ErrnoText(errno)));
  timer_.Reset(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (!timer_.valid()) return absl::InternalError(absl::StrCat("timerfd_create failed: ", ErrnoText(errno)));
  armed_ns_ = 0;
  Fd stats_timer;

  auto add = [&](int fd, uint64_t tag, const std::string& what) -> absl::Status {
    epoll_event event;
    std::memset(&event, 0, sizeof(event));
    event.events = EPOLLIN;
    event.data.u64 = tag;
    if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
      return absl::InternalError(absl::StrCat("epoll_ctl(ADD, ", what, ") failed: ", ErrnoText(errno)));
    }
    return absl::OkStatus();
  };
  for (size_t i = 0; i < tuns_.size(); ++i) {
    LOCKSTEP_RETURN_IF_ERROR(add(tuns_[i].get(), i, "the TUN of " + names_[i]));
  }
  LOCKSTEP_RETURN_IF_ERROR(add(timer_.get(), kDeadlineTimerTag, "the deadline timerfd"));
  for (int fd : stop_fds) LOCKSTEP_RETURN_IF_ERROR(add(fd, kStopTag, "a stop descriptor"));

  start_ns_ = last_print_ns_ = MonotonicNowNs();
  last_print_bytes_ = stats_.bytes;
  if (options_.stats_every_s > 0) {
    stats_timer.Reset(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (!stats_timer.valid()) {
      return absl::InternalError(absl::StrCat("timerfd_create (stats) failed: ", ErrnoText(errno)));
    }
    itimerspec spec;
    spec.it_value = spec.it_interval = ToTimespec(static_cast<int64_t>(options_.stats_every_s * 1e9));
    if (::timerfd_settime(stats_timer.get(), 0, &spec, nullptr) != 0) {
      return absl::InternalError(absl::StrCat("timerfd_settime (stats) failed: ", ErrnoText(errno)));
    }
    LOCKSTEP_RETURN_IF_ERROR(add(stats_timer.get(), kStatsTimerTag, "the stats timerfd"));
  }

  const int64_t cpu_start_ns = ThreadCpuNs();
  auto finish = [&](absl::Status status) {
    stats_.elapsed_ns = MonotonicNowNs() - start_ns_;
    stats_.cpu_ns = ThreadCpuNs() - cpu_start_ns;
    return status;
  };

  constexpr int kMaxEvents = 64;
  epoll_event events[kMaxEvents];
  bool stop = false;
  while (!stop) {
    // Within the spin window of the next deadline (or always, busy_poll),
    // poll: a sleeping thread wakes late (tens of us to ms on a VM), a
    // polling one reads arrivals and writes departures on time.
    int64_t before_ns = MonotonicNowNs();
    bool polling = options_.busy_poll || next_deadline_ns_ - before_ns <= options_.spin_ns;
    int n = ::epoll_wait(epoll.get(), events, kMaxEvents, polling ? 0 : -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return finish(absl::InternalError(absl::StrCat("epoll_wait failed: ", ErrnoText(errno))));
    }
    int64_t woke_ns = MonotonicNowNs();
    for (int e = 0; e < n; ++e) {
      uint64_t tag = events[e].data.u64;
      if (tag < tuns_.size()) {
        absl::Status status = ReadFrom(static_cast<int>(tag));
        if (!status.ok()) return finish(status);
      } else if (tag == kDeadlineTimerTag || tag == kStatsTimerTag) {
        uint64_t expirations;
        int fd = tag == kDeadlineTimerTag ? timer_.get() : stats_timer.get();
        if (::read(fd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN) {
          return finish(absl::InternalError(absl::StrCat("read(timerfd) failed: ", ErrnoText(errno))));
        }
        if (tag == kStatsTimerTag) PrintStats(woke_ns);
        if (tag == kDeadlineTimerTag && !polling && armed_ns_ > 0) {
          stats_.timer_wake_late.Record(woke_ns - armed_ns_);
        }
      } else if (tag == kStopTag) {
        stop = true;
      }
    }
    if (n == 0 && polling) stats_.spin_ns += woke_ns - before_ns;
    DispatchDue();
    absl::Status status = ArmTimer();
    if (!status.ok()) return finish(status);
  }
  return finish(absl::OkStatus());
}

bool KeepsItsDelay(int64_t p99_lateness_ns, int64_t delay_ns) {
  return delay_ns == 0 || p99_lateness_ns * 10 <= delay_ns;
}

std::string StatsJson(const ForwarderStats& stats, const ForwarderOptions& options, int hosts,
                      const std::string& extra_fields) {
  int64_t p50 = stats.lateness.Quantile(0.5);
  int64_t p99 = stats.lateness.Quantile(0.99);
  bool valid = KeepsItsDelay(p99, options.delay_ns);
  double elapsed_s = static_cast<double>(stats.elapsed_ns) / 1e9;
  return absl::StrFormat(
      "{\"hosts\": %d, \"delay_us\": %.3f, \"rate_bps\": %d, \"mtu\": %d, "
      "\"packets\": %d, \"bytes\": %d, \"dropped\": %d, \"dropped_not_ipv4\": %d, "
      "\"dropped_unknown_dst\": %d, \"dropped_no_buffer\": %d, \"dropped_write_error\": %d, "
      "\"max_queued\": %d, "
      "\"lateness_p50_us\": %.3f, \"lateness_p99_us\": %.3f, \"lateness_max_us\": %.3f, "
      "\"write_p50_us\": %.3f, \"write_p99_us\": %.3f, \"write_max_us\": %.3f, "
      "\"timer_wakes\": %d, \"timer_wake_late_p50_us\": %.3f, \"timer_wake_late_p99_us\": %.3f, "
      "\"spin_us\": %.3f, \"busy_poll\": %s, "
      "\"valid\": %s, \"valid_rule\": \"p99 lateness <= 10%% of delay (no delay: always)\", "
      "\"elapsed_s\": %.3f, \"cpu_s\": %.3f, \"spin_s\": %.3f, "
      "\"avg_gbps\": %.4f, \"ceiling_gbps\": %.4f, \"ceiling_pps\": %.0f%s}",
      hosts, Us(options.delay_ns), options.rate_bps, options.mtu, stats.packets, stats.bytes, stats.dropped(),
      stats.dropped_not_ipv4, stats.dropped_unknown_dst, stats.dropped_no_buffer, stats.dropped_write_error,
      stats.max_queued, Us(p50), Us(p99), Us(stats.lateness.max_ns()), Us(stats.write_duration.Quantile(0.5)),
      Us(stats.write_duration.Quantile(0.99)), Us(stats.write_duration.max_ns()), stats.timer_wake_late.count(),
      Us(stats.timer_wake_late.Quantile(0.5)), Us(stats.timer_wake_late.Quantile(0.99)), Us(options.spin_ns),
      options.busy_poll ? "true" : "false", valid ? "true" : "false", elapsed_s,
      static_cast<double>(stats.cpu_ns) / 1e9, static_cast<double>(stats.spin_ns) / 1e9,
      elapsed_s > 0 ? static_cast<double>(stats.bytes) * 8 / elapsed_s / 1e9 : 0.0,
      CeilingPerSecond(static_cast<double>(stats.bytes) * 8, stats) / 1e9,
      CeilingPerSecond(static_cast<double>(stats.packets), stats), extra_fields.empty() ? "" : ", " + extra_fields);
}

std::string StatsLine(const ForwarderStats& stats, const ForwarderOptions& options) {
  int64_t p99 = stats.lateness.Quantile(0.99);
  return absl::StrFormat(
      "delay_link: %d packets, %d bytes, %d dropped; lateness p50 %.1f us, p99 %.1f us, max %.1f us "
      "(delay %.1f us: %s); ceiling %.2f Gbit/s, %.0f packets/s per CPU-second of work",
      stats.packets, stats.bytes, stats.dropped(), Us(stats.lateness.Quantile(0.5)), Us(p99),
      Us(stats.lateness.max_ns()), Us(options.delay_ns),
      KeepsItsDelay(p99, options.delay_ns) ? "valid" : "INVALID: p99 > 10% of delay",
      CeilingPerSecond(static_cast<double>(stats.bytes) * 8, stats) / 1e9,
      CeilingPerSecond(static_cast<double>(stats.packets), stats));
}

}  // namespace scale_lab
}  // namespace lockstep
