#include "tools/scale_lab/netns_tun.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace lockstep {
namespace scale_lab {
namespace {

std::string ErrnoText(int err) { return absl::StrCat(std::strerror(err), " (errno ", err, ")"); }

// What to do about an errno from a privileged network call.
std::string Advice(int err) {
  if (err == EPERM || err == EACCES) return ": needs CAP_NET_ADMIN (run as root)";
  return "";
}

absl::Status Ioctl(int fd, unsigned long request, const char* request_name, struct ifreq* ifr,
                   const TunOptions& options) {
  if (::ioctl(fd, request, ifr) == 0) return absl::OkStatus();
  int err = errno;
  std::string advice = Advice(err);
  if (request == SIOCSIFMTU && err == EINVAL) advice = ": --mtu must be in 68..65535";
  return absl::InternalError(absl::StrCat("ioctl(", request_name, ") on ", options.ifname, " in network namespace ",
                                          options.netns, " failed: ", ErrnoText(err), advice));
}

}  // namespace

std::string Ipv4ToString(uint32_t address) {
  return absl::StrCat(address >> 24, ".", (address >> 16) & 255, ".", (address >> 8) & 255, ".", address & 255);
}

absl::Status RunInNetns(const std::string& netns, const std::function<absl::Status()>& fn) {
  Fd own(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!own.valid()) {
    int err = errno;
    return absl::InternalError(
        absl::StrCat("open(/proc/thread-self/ns/net) failed: ", ErrnoText(err), " (is /proc mounted?)"));
  }
  std::string path = "/var/run/netns/" + netns;
  Fd target(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!target.valid()) {
    int err = errno;
    std::string advice = err == ENOENT ? absl::StrCat(": create it first (ip netns add ", netns, ")") : Advice(err);
    return absl::NotFoundError(
        absl::StrCat("network namespace ", netns, ": open(", path, ") failed: ", ErrnoText(err), advice));
  }
  if (::setns(target.get(), CLONE_NEWNET) != 0) {
    int err = errno;
    return absl::InternalError(absl::StrCat("setns(", path, ", CLONE_NEWNET) failed: ", ErrnoText(err), Advice(err)));
  }
  absl::Status status = fn();
  if (::setns(own.get(), CLONE_NEWNET) != 0) {
    int err = errno;
    return absl::InternalError(absl::StrCat("setns back from network namespace ", netns, " failed: ", ErrnoText(err),
                                            "; the thread is in the wrong namespace: exit"));
  }
  return status;
}

absl::StatusOr<Fd> OpenTunInNetns(const TunOptions& options) {
  if (options.ifname.empty() || options.ifname.size() >= IFNAMSIZ) {
    return absl::InvalidArgumentError(
        absl::StrCat("interface name '", options.ifname, "' must have 1..", IFNAMSIZ - 1, " characters"));
  }
  Fd tun;
  absl::Status status = RunInNetns(options.netns, [&]() -> absl::Status {
    tun.Reset(::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC));
    if (!tun.valid()) {
      int err = errno;
      return absl::InternalError(absl::StrCat(
          "open(/dev/net/tun) in network namespace ", options.netns, " failed: ", ErrnoText(err),
          err == ENOENT ? ": the kernel has no TUN device (modprobe tun; mknod /dev/net/tun c 10 200)" : Advice(err)));
    }
    struct ifreq ifr;
    std::memset(&ifr, 0, sizeof(ifr));
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    std::memcpy(ifr.ifr_name, options.ifname.data(), options.ifname.size());
    if (::ioctl(tun.get(), TUNSETIFF, &ifr) != 0) {
      int err = errno;
      std::string advice = Advice(err);
      if (err == EBUSY || err == EINVAL || err == EEXIST) {
        advice =
            absl::StrCat(": a device named ", options.ifname, " may already exist there (",
                         "another delay_link? `ip -n ", options.netns, " link`): stop it or choose another --ifname");
      }
      return absl::InternalError(absl::StrCat("ioctl(TUNSETIFF, ", options.ifname, ") in network namespace ",
                                              options.netns, " failed: ", ErrnoText(err), advice));
    }

    Fd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!sock.valid()) {
      int err = errno;
      return absl::InternalError(
          absl::StrCat("socket(AF_INET) in network namespace ", options.netns, " failed: ", ErrnoText(err)));
    }
    auto set_in = [](struct sockaddr* sa, uint32_t address) {
      struct sockaddr_in sin;
      std::memset(&sin, 0, sizeof(sin));
      sin.sin_family = AF_INET;
      sin.sin_addr.s_addr = htonl(address);
      std::memcpy(sa, &sin, sizeof(sin));
    };
    // No IPv6 on the link: the forwarder carries IPv4 only, and a device
    // without IPv6 sends no router solicitations or MLD reports to drop.
    // Best effort (a kernel without IPv6 has no such file); /proc/sys/net
    // is this thread's namespace's.
    std::string disable_ipv6 = "/proc/sys/net/ipv6/conf/" + options.ifname + "/disable_ipv6";
    Fd sysctl(::open(disable_ipv6.c_str(), O_WRONLY | O_CLOEXEC));
    if (sysctl.valid() && ::write(sysctl.get(), "1", 1) != 1) {
      // Harmless: IPv6 packets are dropped (and counted) by the forwarder.
    }
    set_in(&ifr.ifr_addr, options.address);
    LOCKSTEP_RETURN_IF_ERROR(Ioctl(sock.get(), SIOCSIFADDR, "SIOCSIFADDR", &ifr, options));
    uint32_t mask = options.prefix_len == 0 ? 0 : ~uint32_t{0} << (32 - options.prefix_len);
    set_in(&ifr.ifr_netmask, mask);
    LOCKSTEP_RETURN_IF_ERROR(Ioctl(sock.get(), SIOCSIFNETMASK, "SIOCSIFNETMASK", &ifr, options));
    ifr.ifr_mtu = options.mtu;
    LOCKSTEP_RETURN_IF_ERROR(Ioctl(sock.get(), SIOCSIFMTU, "SIOCSIFMTU", &ifr, options));
    LOCKSTEP_RETURN_IF_ERROR(Ioctl(sock.get(), SIOCGIFFLAGS, "SIOCGIFFLAGS", &ifr, options));
    ifr.ifr_flags |= IFF_UP;
    return Ioctl(sock.get(), SIOCSIFFLAGS, "SIOCSIFFLAGS", &ifr, options);
  });
  if (!status.ok()) return status;
  return tun;
}

}  // namespace scale_lab
}  // namespace lockstep
