#include "collectives/transport/tcp/address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lockstep {
namespace {

std::string AddressText(const sockaddr* sa) {
  char text[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, text, sizeof(text));
  } else if (sa->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, text, sizeof(text));
  }
  return text;
}

bool IsLinkLocalV6(const std::string& address) { return address.rfind("fe80:", 0) == 0; }

std::string InterfaceNames() {
  std::vector<std::string> names;
  for (const InterfaceAddress& a : LocalAddresses()) {
    const std::string entry = absl::StrCat(a.interface, " ", a.address);
    names.push_back(entry);
  }
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

// The source address the kernel would use toward `host` (resolved), or ""
// when there is no route. A connected UDP socket sends nothing.
std::string SourceAddressToward(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* result = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &result) != 0) return "";
  std::string source;
  for (addrinfo* ai = result; ai != nullptr && source.empty(); ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      sockaddr_storage local{};
      socklen_t len = sizeof(local);
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
        source = AddressText(reinterpret_cast<sockaddr*>(&local));
      }
    }
    ::close(fd);
  }
  freeaddrinfo(result);
  return source;
}

}  // namespace

std::vector<InterfaceAddress> LocalAddresses() {
  std::vector<InterfaceAddress> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    out.push_back({i->ifa_name, AddressText(i->ifa_addr), (i->ifa_flags & IFF_LOOPBACK) != 0,
                   (i->ifa_flags & IFF_UP) != 0, family == AF_INET6});
  }
  freeifaddrs(list);
  return out;
}

bool IsLoopbackAddress(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address == "::1" || address == "localhost";
}

void ApplyAddressEnvironment(AddressSelection* selection) {
  if (selection->host.empty()) {
    if (const char* v = std::getenv("LOCKSTEP_SOCKET_ADDR"); v != nullptr) selection->host = v;
  }
  if (selection->ifname.empty()) {
    if (const char* v = std::getenv("LOCKSTEP_SOCKET_IFNAME"); v != nullptr) selection->ifname = v;
  }
}

absl::StatusOr<std::string> ChooseLocalAddress(const AddressSelection& selection) {
  if (!selection.host.empty()) return selection.host;
  const std::vector<InterfaceAddress> addresses = LocalAddresses();
  if (!selection.ifname.empty()) {
    std::string v6;
    for (const InterfaceAddress& a : addresses) {
      if (a.interface != selection.ifname) continue;
      if (!a.ipv6) return a.address;
      if (v6.empty() && !IsLinkLocalV6(a.address)) v6 = a.address;
    }
    if (!v6.empty()) return v6;
    return absl::NotFoundError(
        absl::StrCat("LOCKSTEP_SOCKET_IFNAME=", selection.ifname,
                     ": no such interface with an address on this host (addresses: ", InterfaceNames(), ")"));
  }
  std::string chosen;
  if (!selection.master_addr.empty()) {
    // MASTER_ADDR may be one of our own addresses (this host runs rank 0).
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    addrinfo* result = nullptr;
    if (getaddrinfo(selection.master_addr.c_str(), nullptr, &hints, &result) == 0) {
      for (addrinfo* ai = result; ai != nullptr && chosen.empty(); ai = ai->ai_next) {
        const std::string text = AddressText(ai->ai_addr);
        for (const InterfaceAddress& a : addresses) {
          if (a.address == text) chosen = text;
        }
      }
      freeaddrinfo(result);
    }
    if (chosen.empty()) chosen = SourceAddressToward(selection.master_addr);
  }
  if (!chosen.empty() && !(selection.spans_hosts && IsLoopbackAddress(chosen))) return chosen;
  if (!selection.spans_hosts) return chosen.empty() ? std::string("127.0.0.1") : chosen;
  // A multi-host group must not advertise loopback: the first interface up.
  for (bool want_v6 : {false, true}) {
    for (const InterfaceAddress& a : addresses) {
      if (a.loopback || !a.up || a.ipv6 != want_v6 || (a.ipv6 && IsLinkLocalV6(a.address))) continue;
      return a.address;
    }
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "no address for this rank that other hosts can reach: MASTER_ADDR=", selection.master_addr, " leads to ",
      chosen.empty() ? "no route" : chosen, " and this host has no other interface up (addresses: ", InterfaceNames(),
      "). Set LOCKSTEP_SOCKET_IFNAME=<interface> or LOCKSTEP_SOCKET_ADDR=<address>"));
}

}  // namespace lockstep
