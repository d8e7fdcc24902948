// Network namespaces and TUN devices for the scale lab.
//
// A TUN file descriptor and a socket stay bound to the network namespace
// they were created in, so the forwarder enters each namespace just long
// enough to create them and returns to its own:
//
//   TunOptions options;
//   options.netns = "lab-ns0";                     // /var/run/netns/lab-ns0
//   options.ifname = "lab0";
//   options.address = Ipv4(10, 77, 0, 1);
//   options.prefix_len = 16;
//   options.mtu = 65000;
//   LOCKSTEP_ASSIGN_OR_RETURN(Fd tun, OpenTunInNetns(options));
//
// The device is not persistent: it goes away with the last descriptor (when
// the process exits, however it exits), so nothing is left behind.
// Configuration uses ioctls from inside the namespace (no `ip` subprocess).
#ifndef LOCKSTEP_TOOLS_SCALE_LAB_NETNS_TUN_H_
#define LOCKSTEP_TOOLS_SCALE_LAB_NETNS_TUN_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/fd.h"

namespace lockstep {
namespace scale_lab {

// An IPv4 address in host byte order.
constexpr uint32_t Ipv4(int a, int b, int c, int d) {
  return (static_cast<uint32_t>(a) << 24) | (static_cast<uint32_t>(b) << 16) | (static_cast<uint32_t>(c) << 8) |
         static_cast<uint32_t>(d);
}
std::string Ipv4ToString(uint32_t address);

// Runs `fn` with the calling thread in network namespace `netns` (a name
// under /var/run/netns, as `ip netns add` makes), then returns the thread to
// the namespace it was in. A failure to return is an error that the caller
// must treat as fatal (the thread is in the wrong namespace).
absl::Status RunInNetns(const std::string& netns, const std::function<absl::Status()>& fn);

struct TunOptions {
  std::string netns;
  std::string ifname = "lab0";
  uint32_t address = 0;  // host byte order
  int prefix_len = 16;
  int mtu = 1500;
};

// Creates TUN device `ifname` (IFF_TUN | IFF_NO_PI) in `netns`, gives it
// `address`/`prefix_len` and `mtu`, sets it up, and returns its descriptor
// (nonblocking, close-on-exec).
absl::StatusOr<Fd> OpenTunInNetns(const TunOptions& options);

}  // namespace scale_lab
}  // namespace lockstep

#endif  // LOCKSTEP_TOOLS_SCALE_LAB_NETNS_TUN_H_
