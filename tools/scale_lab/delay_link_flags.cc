#include "tools/scale_lab/delay_link_flags.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace lockstep {
namespace scale_lab {

const char kDelayLinkUsage[] = R"(usage: delay_link --netns=NS0,NS1,... --delay_us=D [flags]

Joins H hosts (network namespaces, made beforehand with `ip netns add`)
through a switch that delays every packet by D microseconds. In each
namespace it creates TUN device --ifname with address <subnet>.0.<i+1>/16
(host i), MTU --mtu, up; the devices go away when delay_link exits. It
then prints "ready" on stdout (and writes --ready_file) and forwards IPv4
packets until SIGTERM or SIGINT, when it prints a summary on stderr and the
stats as one JSON object on stdout (and in --stats_json).

  --netns=A,B,...        namespaces (names under /var/run/netns), 2..254
  --delay_us=D           one-way delay per hop, microseconds (>= 0; fractions allowed)
  --rate=R               each host's NIC rate, e.g. 1gbit, 100mbit (tc's units,
                         bits/s); default none: no serialization delay
  --mtu=N                TUN MTU, 68..65535 (default 65000)
  --ifname=NAME          TUN device name in every namespace (default lab0)
  --subnet=A.B           addresses A.B.0.1 .. A.B.0.H, /16 (default 10.77)
  --ready_file=FILE      written (atomically) once every link is up
  --stats_json=FILE      the final stats, one JSON object (atomically)
  --stats_every_s=S      a line of stats on stderr every S seconds (default 0: none)
  --spin_us=U            wake U us before a deadline and poll until it (default
                         20); cover the machine's timer lateness (stats:
                         timer_wake_late_p99_us) for deadlines kept to the us
  --busy_poll            never sleep: poll all the time (one core at 100%);
                         also reads arrivals the moment they come. Under
                         SCHED_FIFO the kernel's RT throttling (95%) then
                         stops it ~50 ms each second: pair it with
                         --realtime_priority=0
  --buffers=N            packets in flight, all links together (default
                         64 MiB / mtu, at least 1024); more are dropped
  --realtime_priority=P  SCHED_FIFO priority of the forwarding thread (default
                         50; 0: normal scheduling); refused: a warning
  --selftest             instead of waiting for a signal: a TCP bulk transfer
                         from host 0 to host 1 for --selftest_s seconds (default 3),
                         through the links; adds selftest_* fields to the stats

Stats: packets and bytes forwarded; dropped (not IPv4, unknown destination,
no free buffer, failed write); lateness = the time just before the write to
the destination's TUN less the deadline (arrival + serialization + delay),
p50/p99/max in us; "valid": false when p99 lateness > 10% of the delay.
Throughput: avg_gbps = bytes forwarded / wall time; ceiling_gbps and
ceiling_pps = forwarded per CPU-second of the forwarding thread's work (its
CPU time less busy-waiting; a write to a TUN runs the receiver's network
stack in this thread, so that is counted): what it would sustain with a core
of its own. --selftest measures an achieved rate instead.
)";

namespace {

absl::Status Bad(absl::string_view flag, absl::string_view value, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", value, ": ", why, " (see --help)"));
}

absl::StatusOr<double> ParseDouble(absl::string_view flag, absl::string_view value, double min, double max) {
  double d;
  if (!absl::SimpleAtod(value, &d) || !std::isfinite(d) || d < min || d > max) {
    return Bad(flag, value, absl::StrCat("expected a number in [", min, ", ", max, "]"));
  }
  return d;
}

absl::StatusOr<int> ParseInt(absl::string_view flag, absl::string_view value, int min, int max) {
  int i;
  if (!absl::SimpleAtoi(value, &i) || i < min || i > max) {
    return Bad(flag, value, absl::StrCat("expected an integer in [", min, ", ", max, "]"));
  }
  return i;
}

absl::StatusOr<bool> ParseBool(absl::string_view flag, absl::string_view value) {
  if (value.empty() || value == "true" || value == "1") return true;
  if (value == "false" || value == "0") return false;
  return Bad(flag, value, "expected true or false");
}

}  // namespace

absl::StatusOr<int64_t> ParseRateBps(absl::string_view text) {
  std::string lower = absl::AsciiStrToLower(text);
  absl::string_view rest = lower;
  double multiplier = 1;
  struct Unit {
    const char* suffix;
    double multiplier;
  };
  static const Unit kUnits[] = {{"tbit", 1e12}, {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}};
  if (absl::EndsWith(rest, "bps")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rate=", text, ": give bits per second (e.g. 1gbit, 100mbit); tc's bps means bytes"));
  }
  for (const Unit& unit : kUnits) {
    if (absl::ConsumeSuffix(&rest, unit.suffix)) {
      multiplier = unit.multiplier;
      break;
    }
  }
  double value;
  if (!absl::SimpleAtod(rest, &value) || !std::isfinite(value) || value < 0 || value * multiplier > 1e13) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rate=", text, ": expected e.g. 1gbit, 100mbit, 800kbit (up to 10tbit) or 0"));
  }
  return static_cast<int64_t>(std::llround(value * multiplier));
}

absl::StatusOr<DelayLinkFlags> ParseDelayLinkFlags(const std::vector<std::string>& args) {
  DelayLinkFlags flags;
  int subnet_a = 10, subnet_b = 77;
  bool buffers_given = false;
  for (const std::string& arg : args) {
    absl::string_view a = arg;
    if (a == "-h" || a == "--help") {
      flags.help = true;
      return flags;
    }
    if (!absl::ConsumePrefix(&a, "--")) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "' (see --help)"));
    }
    std::pair<std::string, std::string> kv = absl::StrSplit(a, absl::MaxSplits('=', 1));
    const std::string& name = kv.first;
    const std::string& value = kv.second;
    bool has_value = absl::StrContains(a, '=');
    if (!has_value && name != "selftest" && name != "busy_poll") {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value: --", name, "=... (see --help)"));
    }
    if (name == "netns") {
      flags.netns = absl::StrSplit(value, ',', absl::SkipEmpty());
    } else if (name == "delay_us") {
      auto d = ParseDouble(name, value, 0, 10e6);
      if (!d.ok()) return d.status();
      flags.delay_ns = std::llround(*d * 1e3);
    } else if (name == "rate") {
      auto r = ParseRateBps(value);
      if (!r.ok()) return r.status();
      flags.rate_bps = *r;
    } else if (name == "mtu") {
      auto m = ParseInt(name, value, 68, 65535);
      if (!m.ok()) return m.status();
      flags.mtu = *m;
    } else if (name == "ifname") {
      if (value.empty() || value.size() > 15 || value.find('/') != std::string::npos) {
        return Bad(name, value, "an interface name has 1..15 characters and no '/'");
      }
      flags.ifname = value;
    } else if (name == "subnet") {
      std::vector<std::string> parts = absl::StrSplit(value, '.');
      if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &subnet_a) || !absl::SimpleAtoi(parts[1], &subnet_b) ||
          subnet_a < 0 || subnet_a > 255 || subnet_b < 0 || subnet_b > 255) {
        return Bad(name, value, "expected the first two octets of a /16, e.g. 10.77");
      }
    } else if (name == "stats_json") {
      flags.stats_json = value;
    } else if (name == "ready_file") {
      flags.ready_file = value;
    } else if (name == "stats_every_s") {
      auto s = ParseDouble(name, value, 0, 86400);
      if (!s.ok()) return s.status();
      flags.stats_every_s = *s;
    } else if (name == "spin_us") {
      auto s = ParseDouble(name, value, 0, 10000);
      if (!s.ok()) return s.status();
      flags.spin_ns = std::llround(*s * 1e3);
    } else if (name == "busy_poll") {
      auto b = ParseBool(name, value);
      if (!b.ok()) return b.status();
      flags.busy_poll = *b;
    } else if (name == "buffers") {
      auto b = ParseInt(name, value, 16, 1 << 20);
      if (!b.ok()) return b.status();
      flags.buffers = *b;
      buffers_given = true;
    } else if (name == "realtime_priority") {
      auto p = ParseInt(name, value, 0, 99);
      if (!p.ok()) return p.status();
      flags.realtime_priority = *p;
    } else if (name == "selftest") {
      auto b = ParseBool(name, value);
      if (!b.ok()) return b.status();
      flags.selftest = *b;
    } else if (name == "selftest_s") {
      auto s = ParseDouble(name, value, 0.1, 3600);
      if (!s.ok()) return s.status();
      flags.selftest_s = *s;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
    }
  }
  if (flags.netns.size() < 2 || flags.netns.size() > 254) {
    return absl::InvalidArgumentError(
        absl::StrCat("--netns needs 2..254 namespace names, comma-separated (got ", flags.netns.size(), ")"));
  }
  std::set<std::string> seen;
  for (const std::string& ns : flags.netns) {
    if (ns.find('/') != std::string::npos || ns == "." || ns == "..") {
      return Bad("netns", ns, "a namespace name (under /var/run/netns) has no '/'");
    }
    if (!seen.insert(ns).second) return Bad("netns", ns, "listed twice");
  }
  if (flags.delay_ns < 0) return absl::InvalidArgumentError("--delay_us=D is required (see --help)");
  flags.subnet = (static_cast<uint32_t>(subnet_a) << 24) | (static_cast<uint32_t>(subnet_b) << 16);
  if (!buffers_given) flags.buffers = std::max(1024, (64 << 20) / flags.mtu);
  return flags;
}

}  // namespace scale_lab
}  // namespace lockstep
