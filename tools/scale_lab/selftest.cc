#include "tools/scale_lab/selftest.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/fd.h"
#include "tools/scale_lab/netns_tun.h"

namespace lockstep {
namespace scale_lab {
namespace {

std::string ErrnoText(int err) { return absl::StrCat(std::strerror(err), " (errno ", err, ")"); }

sockaddr_in SockaddrOf(uint32_t address, uint16_t port) {
  sockaddr_in sin;
  std::memset(&sin, 0, sizeof(sin));
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(address);
  sin.sin_port = htons(port);
  return sin;
}

// The stream is a pseudo-random pattern with period kPeriod (odd, so that it
// does not line up with the socket's chunks): byte i is pattern[i % kPeriod].
// `pattern` holds two periods, so that any run of up to kPeriod bytes is
// contiguous in it and both ends send and check with memcpy-speed calls.
constexpr size_t kPeriod = (1 << 20) - 1;

std::vector<uint8_t> MakePattern() {
  std::vector<uint8_t> pattern(2 * kPeriod);
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  for (size_t i = 0; i < kPeriod; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    pattern[i] = pattern[i + kPeriod] = static_cast<uint8_t>(x);
  }
  return pattern;
}

}  // namespace

absl::StatusOr<SelftestResult> RunSelftest(Forwarder& forwarder, const std::vector<std::string>& netns,
                                           uint32_t address0, uint32_t address1, double seconds,
                                           const std::vector<int>& stop_fds) {
  Fd listener, client;
  uint16_t port = 0;
  absl::Status status = RunInNetns(netns[1], [&]() -> absl::Status {
    listener.Reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!listener.valid())
      return absl::InternalError(absl::StrCat("selftest: socket in ", netns[1], ": ", ErrnoText(errno)));
    sockaddr_in sin = SockaddrOf(address1, 0);
    socklen_t len = sizeof(sin);
    if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) != 0 ||
        ::listen(listener.get(), 1) != 0 ||
        ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&sin), &len) != 0) {
      return absl::InternalError(
          absl::StrCat("selftest: bind/listen on ", Ipv4ToString(address1), " in ", netns[1], ": ", ErrnoText(errno)));
    }
    port = ntohs(sin.sin_port);
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  status = RunInNetns(netns[0], [&]() -> absl::Status {
    client.Reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!client.valid())
      return absl::InternalError(absl::StrCat("selftest: socket in ", netns[0], ": ", ErrnoText(errno)));
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  Fd done(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!done.valid()) return absl::InternalError(absl::StrCat("selftest: eventfd: ", ErrnoText(errno)));

  const std::vector<uint8_t> pattern = MakePattern();
  std::atomic<bool> abort{false};
  SelftestResult result;
  std::string sender_error;
  auto signal_done = [&] {
    uint64_t one = 1;
    if (::write(done.get(), &one, sizeof(one)) != sizeof(one)) {
      // Cannot happen for an eventfd below its maximum.
    }
  };

  // Threads start at normal priority: the caller's SCHED_FIFO is set with
  // SCHED_RESET_ON_FORK, which new threads do not inherit.
  std::thread receiver([&] {
    pollfd p{listener.get(), POLLIN, 0};
    int ready = ::poll(&p, 1, 30'000);
    if (ready <= 0 || abort) {
      result.error = ready == 0 ? "no connection within 30 s" : "aborted";
      signal_done();
      return;
    }
    Fd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn.valid()) {
      result.error = absl::StrCat("accept: ", ErrnoText(errno));
      signal_done();
      return;
    }
    std::vector<uint8_t> buffer(1 << 20);
    int64_t first_ns = 0, last_ns = 0;
    uint64_t offset = 0;
    bool corrupt = false;
    for (;;) {
      ssize_t n = ::read(conn.get(), buffer.data(), buffer.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (n < 0) result.error = absl::StrCat("read: ", ErrnoText(errno));
        break;
      }
      last_ns = MonotonicNowNs();
      if (first_ns == 0) first_ns = last_ns;
      for (size_t done_bytes = 0; done_bytes < static_cast<size_t>(n);) {
        size_t run = std::min(static_cast<size_t>(n) - done_bytes, kPeriod);
        corrupt |= std::memcmp(buffer.data() + done_bytes, pattern.data() + (offset + done_bytes) % kPeriod, run) != 0;
        done_bytes += run;
      }
      offset += n;
    }
    result.bytes = static_cast<int64_t>(offset);
    result.seconds = static_cast<double>(last_ns - first_ns) / 1e9;
    result.gbps = result.seconds > 0 ? result.bytes * 8 / result.seconds / 1e9 : 0;
    if (corrupt) result.error = "the bytes received differ from the bytes sent";
    result.completed = result.error.empty() && !abort;
    signal_done();
  });
  std::thread sender([&] {
    sockaddr_in to = SockaddrOf(address1, port);
    if (::connect(client.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
      sender_error = absl::StrCat("connect to ", Ipv4ToString(address1), ":", port, ": ", ErrnoText(errno));
      ::shutdown(listener.get(), SHUT_RDWR);
      return;
    }
    uint64_t offset = 0;
    const int64_t end_ns = MonotonicNowNs() + static_cast<int64_t>(seconds * 1e9);
    while (!abort && MonotonicNowNs() < end_ns) {
      ssize_t n = ::send(client.get(), pattern.data() + offset % kPeriod, kPeriod, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        sender_error = absl::StrCat("write: ", ErrnoText(errno));
        ::shutdown(client.get(), SHUT_RDWR);
        return;
      }
      offset += n;
    }
    ::shutdown(client.get(), SHUT_WR);
  });

  std::vector<int> stops = stop_fds;
  stops.push_back(done.get());
  status = forwarder.Run(stops);
  // Stopped early (a signal, an error): unblock both threads.
  abort = true;
  ::shutdown(client.get(), SHUT_RDWR);
  ::shutdown(listener.get(), SHUT_RDWR);
  sender.join();
  receiver.join();
  if (!status.ok()) return status;
  if (!sender_error.empty() && result.error.empty()) result.error = sender_error;
  if (!result.error.empty()) result.completed = false;
  return result;
}

std::string SelftestJsonFields(const SelftestResult& result) {
  std::string error;
  for (char c : result.error) {
    if (c == '"' || c == '\\') error += '\\';
    error += (c >= 0x20 ? c : ' ');
  }
  return absl::StrFormat(
      "\"selftest\": \"tcp bulk host 0 -> host 1\", \"selftest_completed\": %s, \"selftest_bytes\": %d, "
      "\"selftest_seconds\": %.3f, \"selftest_gbps\": %.4f, \"selftest_error\": \"%s\"",
      result.completed ? "true" : "false", result.bytes, result.seconds, result.gbps, error);
}

}  // namespace scale_lab
}  // namespace lockstep
